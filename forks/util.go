package forks

import "time"

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func copyDetails(d map[string]any) map[string]any {
	if d == nil {
		return nil
	}
	c := make(map[string]any, len(d))
	for k, v := range d {
		c[k] = v
	}
	return c
}

package repositories

import "github.com/lockstep-hq/lockstep/telemetry"

var ms = telemetry.Millis

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

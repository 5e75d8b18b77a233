package gate

import "context"

// lane is the landing queue of one branch: a FIFO lock. Waiters are served
// in arrival order (sync.Mutex makes no such promise), so a promote queued
// behind others is never starved, and each one lands on top of the last.
type lane struct {
	mu    chan struct{} // guards queue
	queue []chan struct{}
}

func (s *Service) lane(key string) *lane {
	s.lanesMu.Lock()
	defer s.lanesMu.Unlock()
	l, ok := s.lanes[key]
	if !ok {
		l = &lane{mu: make(chan struct{}, 1)}
		s.lanes[key] = l
	}
	return l
}

func (l *lane) acquire(ctx context.Context) error {
	l.mu <- struct{}{}
	me := make(chan struct{}, 1)
	l.queue = append(l.queue, me)
	first := len(l.queue) == 1
	<-l.mu
	if first {
		return nil
	}
	select {
	case <-me:
		return nil
	case <-ctx.Done():
		l.mu <- struct{}{}
		for i, c := range l.queue {
			if c == me {
				select {
				case <-me: // granted meanwhile: pass it on
					l.queue = append(l.queue[:i], l.queue[i+1:]...)
					if len(l.queue) > 0 && i == 0 {
						l.queue[0] <- struct{}{}
					}
				default:
					l.queue = append(l.queue[:i], l.queue[i+1:]...)
				}
				break
			}
		}
		<-l.mu
		return ctx.Err()
	}
}

func (l *lane) release() {
	l.mu <- struct{}{}
	l.queue = l.queue[1:]
	if len(l.queue) > 0 {
		l.queue[0] <- struct{}{}
	}
	<-l.mu
}

package lockstep

import "context"

// Locker is the distributed-lock seam: what several replicas must
// serialize (the landing queue of a branch) takes a named lock. One
// replica alone needs none (the gate's in-process lanes order its
// promotes); redislock (SET NX PX with renewal on Redis) is the
// implementation for several.
//
// Error contract: Lock blocks until it holds the lock or ctx ends (then
// ctx's error); any other error means the lock service failed and the
// caller must not proceed. unlock releases the lock and is safe to call
// once.
type Locker interface {
	Lock(ctx context.Context, name string) (unlock func(), err error)
}

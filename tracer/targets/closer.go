package targets

import "sync"

// closer runs detach work off the control loop, in order. Closing a
// uprobe link waits for the kernel (150–220 ms a process on the CI VM):
// done inline when a process exits, it kept the control loop from
// attaching the processes that start meanwhile, and under --all a burst
// of short-lived processes went mostly untraced.
type closer struct {
	mu    sync.Mutex
	queue []func()
	wake  chan struct{}
	idle  sync.Cond // signalled when the queue is empty and nothing runs
	busy  bool
	done  chan struct{}
}

func newCloser() *closer {
	c := &closer{wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.idle.L = &c.mu
	go c.run()
	return c
}

// add queues work; it never blocks on the work itself.
func (c *closer) add(fs ...func()) {
	if len(fs) == 0 {
		return
	}
	c.mu.Lock()
	c.queue = append(c.queue, fs...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *closer) run() {
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			if len(c.queue) == 0 {
				c.busy = false
				c.idle.Broadcast()
				c.mu.Unlock()
				break
			}
			f := c.queue[0]
			c.queue = c.queue[1:]
			c.busy = true
			c.mu.Unlock()
			f()
		}
	}
}

// wait returns once everything queued so far has run.
func (c *closer) wait() {
	c.mu.Lock()
	for len(c.queue) > 0 || c.busy {
		c.idle.Wait()
	}
	c.mu.Unlock()
}

// stop waits for the queue and ends the goroutine.
func (c *closer) stop() {
	c.wait()
	close(c.done)
}

package collectives

import "sync"

// runChunkPipeline runs stages over chunks 0..chunks-1 in order: stage j
// takes chunk i once stage j-1 has finished it, each stage in a goroutine
// of its own, so that successive chunks are in different stages at once.
// The stages of one chunk must use tags no other (stage, chunk) uses.
//
// The first failure is returned. A failed stage has failed the operation
// (Op.Fail), which fails the other stages' pending receives; the stages
// after it stop at the first chunk it did not finish.
func runChunkPipeline(chunks int, stages []func(int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	var in chan struct{} // nil for the first stage: every chunk is ready
	for _, stage := range stages {
		out := make(chan struct{}, chunks)
		wg.Add(1)
		go func(in <-chan struct{}, out chan<- struct{}) {
			defer wg.Done()
			defer close(out)
			for i := range chunks {
				if in != nil {
					if _, ok := <-in; !ok {
						return // the stage before failed
					}
				}
				if err := stage(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				out <- struct{}{}
			}
		}(in, out)
		in = out
	}
	wg.Wait()
	return first
}

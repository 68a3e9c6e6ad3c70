package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Set is the server's pipelines by name. It is built once and not changed after.
type Set struct {
	byName  map[string]*Pipeline
	drivers map[string]string
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{byName: map[string]*Pipeline{}, drivers: map[string]string{}} }

// Add adds p, kept by a driver named driver (for the listing).
func (s *Set) Add(p *Pipeline, driver string) {
	s.byName[p.Name()] = p
	s.drivers[p.Name()] = driver
}

// Get returns the pipeline called name.
func (s *Set) Get(name string) (*Pipeline, error) {
	if s != nil {
		if p, ok := s.byName[name]; ok {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: %q (jobs.pipelines has %v)", ErrUnknownPipeline, name, s.Names())
}

// Names returns the pipelines' names, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Push pushes a job to the pipeline called name.
func (s *Set) Push(ctx context.Context, name, payload string, headers map[string]string, delay time.Duration) (string, error) {
	p, err := s.Get(name)
	if err != nil {
		return "", err
	}
	return p.Push(ctx, payload, headers, delay)
}

// Consume runs the jobs of the pipelines called names with h on workers consumers they share,
// until ctx is done: a job begins (and counts as an attempt) only when one of the workers is
// free for it, whichever pipeline it comes from.
func (s *Set) Consume(ctx context.Context, names []string, workers int, h Handler) {
	slots := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for _, n := range names {
		if p := s.byName[n]; p != nil {
			wg.Go(func() { p.consume(ctx, workers, slots, h) })
		}
	}
	wg.Wait()
}

// Status returns every pipeline's status, sorted by name.
func (s *Set) Status(ctx context.Context) []Status {
	var out []Status
	for _, n := range s.Names() {
		out = append(out, s.byName[n].Status(ctx, s.drivers[n]))
	}
	return out
}

// Close closes every pipeline's driver.
func (s *Set) Close() error {
	var errs []error
	for _, p := range s.byName {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

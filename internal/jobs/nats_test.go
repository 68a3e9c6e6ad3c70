package jobs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// receiveNothingUntil receives from d until until() holds, failing if d returns a job meanwhile.
func receiveNothingUntil(t *testing.T, d Driver, what string, until func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !until() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		// Cancelled rather than past a deadline: a fetch asked with a deadline that has just
		// passed fails as an invalid option.
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(200*time.Millisecond, cancel)
		ds, err := d.Receive(ctx, 1)
		stop.Stop()
		cancel()
		if len(ds) > 0 {
			t.Fatalf("received job %s (attempt %d) before %s", ds[0].Job.ID, ds[0].Job.Attempt, what)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
}

// redelivered reports whether JetStream delivered one of d's queue messages again.
func redelivered(t *testing.T, d Driver) func() bool {
	return func() bool {
		info, err := d.(*NATS).queue.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.NumRedelivered > 0
	}
}

// TestNATSKeepsAJobDeliveredAgainToItsHolder: a job whose renewals were lost (an outage of NATS
// longer than the lease; here none is sent) is delivered again once its ack wait expired, to
// its own server too, which must not receive it a second time (it was buried as its next
// attempt while it ran). The first delivery's renewals and acknowledgement still count for the
// message: JetStream knows them by its stream sequence, not by delivery. Renewed through it,
// the job is not delivered to another server; acknowledged through it, the queue is empty.
// The lease is 4.1s, as in TestHeldJobsKeepTheirLease, so that the test's renewals may stall
// for three of them (3s) on a loaded machine before the job goes to the other server.
func TestNATSKeepsAJobDeliveredAgainToItsHolder(t *testing.T) {
	const timeout = 2100 * time.Millisecond // a lease of 4.1s
	mk := natsDrivers(t)
	here, other := mk(t, timeout), mk(t, timeout)
	mine := []*Delivery{pushReceived(t, here, true)}
	receiveNothingUntil(t, here, "the job delivered again to its holder", redelivered(t, here))

	// Renewed through its first delivery, it stays here: the other server (past its first
	// lease) receives nothing for a lease and a half.
	renewing, stop := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(RenewEvery(timeout))
		defer tick.Stop()
		for {
			if _, err := here.Renew(context.Background(), mine); err != nil {
				t.Error(err)
			}
			select {
			case <-renewing.Done():
				return
			case <-tick.C:
			}
		}
	}()
	until := time.Now().Add(3 * (timeout + ReclaimGrace) / 2)
	receiveNothingUntil(t, other, "a lease and a half", func() bool { return time.Now().After(until) })
	stop()
	<-renewed

	if err := here.Ack(context.Background(), mine[0]); err != nil {
		t.Fatal(err)
	}
	waitStats(t, here, "an empty queue", func(s Stats) bool { return s == Stats{} })
}

// TestNATSTakesOverOnlyOnceReachedForALease: a job begun on a server that died is not taken
// over by a server that has not reached NATS for a whole lease (an outage has just ended, or it
// has just started: the job's holder may be alive, its renewals lost in the outage). Whether
// JetStream delivers it again, or as new (nats-server, killed, lost its record of the
// delivery; here its consumer is made again), it is given back until then, and received after,
// as its next attempt.
func TestNATSTakesOverOnlyOnceReachedForALease(t *testing.T) {
	for _, asNew := range []bool{false, true} {
		t.Run(fmt.Sprintf("as_new=%v", asNew), func(t *testing.T) {
			mk := natsDrivers(t)
			dying, other := mk(t, holderLeaseTimeout), mk(t, holderLeaseTimeout)
			id := pushReceived(t, dying, true).Job.ID
			_ = dying.Close()
			if asNew {
				// The job is delivered at once, as new, to a server just started.
				js := other.(*NATS).js
				if err := js.DeleteConsumer(context.Background(), other.(*NATS).opts.Stream, natsConsumer); err != nil {
					t.Fatal(err)
				}
				other = mk(t, holderLeaseTimeout) // makes the consumer again
			} else {
				// The other server's calls to NATS failed until now: the job delivered again (a
				// lease after it was received) is the first answer it gets.
				other.(*NATS).reachedSince.Store(0)
			}
			deliveries := func() uint64 {
				info, err := other.(*NATS).queue.Info(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return info.Delivered.Consumer
			}
			before := deliveries()
			receiveNothingUntil(t, other, "the job delivered to the other server", func() bool { return deliveries() > before })

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var got []*Delivery
			for len(got) == 0 && ctx.Err() == nil {
				var err error
				if got, err = other.Receive(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != 1 || got[0].Job.ID != id || got[0].Job.Attempt != 2 {
				t.Fatalf("received %+v; want job %s as its attempt 2", got, id)
			}
		})
	}
}

// TestNATSReachedCountsAnswersOnly: a call NATS answered, with an error or not, counts as
// reaching it; one it did not answer restarts the wait before a takeover; an error of this
// side (the caller gave up, a message acknowledged twice) says nothing.
func TestNATSReachedCountsAnswersOnly(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		reached bool
	}{
		{"answered", nil, true},
		{"not found", jetstream.ErrMsgNotFound, true},
		{"wrong last sequence", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, true},
		{"jetstream unavailable", &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled}, false},
		{"no responders", nats.ErrNoResponders, false},
		{"timeout", nats.ErrTimeout, false},
		{"deadline", context.DeadlineExceeded, false},
		{"connection closed", nats.ErrConnectionClosed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &NATS{}
			n.reached(errors.New("a failure first"))
			n.reached(c.err)
			if got := n.reachedSince.Load() != 0; got != c.reached {
				t.Errorf("reached after %v = %v, want %v", c.err, got, c.reached)
			}
			for _, mine := range []error{context.Canceled, jetstream.ErrMsgAlreadyAckd} {
				n.reachedSince.Store(1)
				n.reached(mine)
				if n.reachedSince.Load() != 1 {
					t.Errorf("%v changed reachedSince", mine)
				}
			}
		})
	}
}

package jobs

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// outlast makes the entry id of the consumer group look as it does after an outage of Redis
// longer than the lease: idle past it, its holder's renewals lost.
func outlast(t *testing.T, rdb *redis.Client, d Driver, stream, id string) {
	t.Helper()
	idle := strconv.FormatInt((time.Minute).Milliseconds(), 10)
	if err := rdb.Do(context.Background(), "XCLAIM", stream, redisGroup, d.(*Redis).consumer, 0, id, "IDLE", idle, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestAServerNeverTakesBackAJobItHolds: after an outage of Redis longer than the lease, the
// entries a server holds look expired to it as well; its XAUTOCLAIM takes them with the
// others', but it delivers only the others': a job it holds (and runs) does not begin a second
// time here as its next attempt, and its acknowledgement stands.
func TestAServerNeverTakesBackAJobItHolds(t *testing.T) {
	mk := redisDrivers(t)
	here, dead := mk(t, holderLeaseTimeout), mk(t, holderLeaseTimeout)
	stream := here.(*Redis).opts.Stream
	mine := []*Delivery{pushReceived(t, here, true)}
	theirs := []*Delivery{pushReceived(t, dead, false)}
	_ = dead.Close() // its server dies holding it

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	outlast(t, rdb, here, stream, mine[0].ref.(string))
	outlast(t, rdb, dead, stream, theirs[0].ref.(string))

	// The dead server's job is taken over; the one held here is not received again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*Delivery
	var err error
	for len(got) == 0 && ctx.Err() == nil {
		if got, err = here.Receive(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0].Job.ID != theirs[0].Job.ID {
		for _, d := range got {
			t.Errorf("received job %s, attempt %d (held here: %s)", d.Job.ID, d.Job.Attempt, mine[0].Job.ID)
		}
		t.Fatalf("received %d jobs after the outage; want the dead server's only", len(got))
	}
	for _, d := range append(mine, got...) {
		if err := here.Ack(context.Background(), d); err != nil {
			t.Errorf("Ack of job %s = %v", d.Job.ID, err)
		}
	}
	waitStats(t, here, "an empty queue", func(s Stats) bool { return s == Stats{} })
}

// TestRedisTakesOverOnlyOnceReachedForALease: after an outage of Redis longer than the lease,
// the jobs of every server look expired, living holders' included. A server takes over another's
// job only once it has reached Redis for a whole lease (by when a living holder has renewed it),
// then as its next attempt. The outage test cannot show this rule by itself: there the holder
// usually renews before the other server looks.
func TestRedisTakesOverOnlyOnceReachedForALease(t *testing.T) {
	mk := redisDrivers(t)
	here, dead := mk(t, holderLeaseTimeout), mk(t, holderLeaseTimeout)
	stream := here.(*Redis).opts.Stream
	theirs := pushReceived(t, dead, true)
	_ = dead.Close()

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	outlast(t, rdb, dead, stream, theirs.ref.(string))
	reached := now()
	here.(*Redis).reachedSince.Store(reached) // Redis has just come back
	lease := (holderLeaseTimeout + ReclaimGrace).Milliseconds()
	// Stop looking a little before the lease is up: a Receive begun just before its end may
	// rightly take the job.
	receiveNothingUntil(t, here, "a lease of reaching Redis", func() bool { return now()-reached >= lease-500 })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*Delivery
	for len(got) == 0 && ctx.Err() == nil {
		var err error
		if got, err = here.Receive(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0].Job.ID != theirs.Job.ID || got[0].Job.Attempt != 2 {
		t.Fatalf("received %v after the lease; want job %s as attempt 2", got, theirs.Job.ID)
	}
	if err := here.Ack(context.Background(), got[0]); err != nil {
		t.Fatal(err)
	}
	waitStats(t, here, "an empty queue", func(s Stats) bool { return s == Stats{} })
}

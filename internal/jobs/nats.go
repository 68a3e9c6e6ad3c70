package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSOptions configure the nats driver.
type NATSOptions struct {
	URL    string // nats://host:port
	Stream string // the JetStream stream's name; STREAM_DELAYED and STREAM_DEAD are made beside it
	// Timeout is the pipeline's timeout: the consumer's ack wait, after which a job received by
	// a server that died is delivered again (plus ReclaimGrace).
	Timeout time.Duration
}

// natsConsumer is the durable consumer every server pulls through.
const natsConsumer = "peregrine"

// NATS is the nats driver: three JetStream streams with work-queue retention, each read
// through one durable pull consumer shared by every server:
//
//	STREAM          subject peregrine.STREAM          the queue; ack wait = timeout + ReclaimGrace
//	STREAM_DELAYED  subject peregrine.STREAM.delayed  jobs not yet due: a message received early is
//	                                                  NAKed with the delay left (the server redelivers
//	                                                  it then: no polling), a due one is published to
//	                                                  the queue and acknowledged
//	STREAM_DEAD     subject peregrine.STREAM.dead     the dead letters
//
// A job's attempt travels in the job; JetStream's own delivery count adds the deliveries whose
// server died (ack wait expired). Every publish carries a message id (job id and attempt), so
// the deduplication window absorbs a move repeated after a crash between publish and ack.
type NATS struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	opts    NATSOptions
	subject string
	queue   jetstream.Consumer
	delayed jetstream.Consumer
	dead    jetstream.Consumer

	stop      context.CancelFunc
	moverDone chan struct{}
	closeOnce sync.Once
}

var _ Driver = (*NATS)(nil)

// NewNATS connects, creates or updates the streams and consumers, and starts the mover of
// delayed jobs.
func NewNATS(ctx context.Context, opts NATSOptions) (*NATS, error) {
	nc, err := nats.Connect(opts.URL, nats.Name("peregrine"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", opts.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	n := &NATS{nc: nc, js: js, opts: opts, subject: "peregrine." + opts.Stream}
	consumer := func(stream, subject string, ackWait time.Duration) (jetstream.Consumer, error) {
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: stream, Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
		}); err != nil {
			return nil, fmt.Errorf("nats %s: stream %s: %w", opts.URL, stream, err)
		}
		c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: natsConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1,
			MaxAckPending: 10000,
		})
		if err != nil {
			return nil, fmt.Errorf("nats %s: consumer of %s: %w", opts.URL, stream, err)
		}
		return c, nil
	}
	if n.queue, err = consumer(opts.Stream, n.subject, opts.Timeout+ReclaimGrace); err == nil {
		if n.delayed, err = consumer(opts.Stream+"_DELAYED", n.subject+".delayed", 30*time.Second); err == nil {
			n.dead, err = consumer(opts.Stream+"_DEAD", n.subject+".dead", 30*time.Second)
		}
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	mctx, stop := context.WithCancel(context.Background())
	n.stop = stop
	n.moverDone = make(chan struct{})
	go n.mover(mctx)
	return n, nil
}

func (n *NATS) publish(ctx context.Context, subject string, j *Job) error {
	return n.publishID(ctx, subject, j, j.ID+"."+strconv.Itoa(j.Attempt)+"."+subject)
}

func (n *NATS) publishID(ctx context.Context, subject string, j *Job, msgID string) error {
	_, err := n.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: j.encode()}, jetstream.WithMsgID(msgID))
	return err
}

// Push implements Driver.
func (n *NATS) Push(ctx context.Context, j *Job) error {
	if j.Due > now() {
		return n.publish(ctx, n.subject+".delayed", j)
	}
	return n.publish(ctx, n.subject, j)
}

// fetch receives up to max messages of c: those available at once, or else the first to
// come within a second. Messages it received are returned even if ctx ended meanwhile (the
// caller gives them back).
func fetch(ctx context.Context, c jetstream.Consumer, max int) ([]jetstream.Msg, error) {
	if batch, err := c.FetchNoWait(max); err == nil {
		if msgs := drain(batch); len(msgs) > 0 {
			return msgs, nil
		}
	} else if ctx.Err() == nil {
		return nil, err
	}
	fctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	batch, err := c.Fetch(1, jetstream.FetchContext(fctx))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return nil, nil
		}
		return nil, err
	}
	msgs := drain(batch)
	if len(msgs) > 0 {
		return msgs, nil
	}
	if err := batch.Error(); err != nil && ctx.Err() == nil &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		return nil, err
	}
	return nil, ctx.Err()
}

func drain(batch jetstream.MessageBatch) []jetstream.Msg {
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	return msgs
}

// mover publishes delayed jobs to the queue when they are due.
func (n *NATS) mover(ctx context.Context) {
	defer close(n.moverDone)
	for ctx.Err() == nil {
		msgs, err := fetch(ctx, n.delayed, 100)
		if err != nil {
			if n.nc.IsClosed() {
				return
			}
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			continue
		}
		for _, m := range msgs {
			j, err := decodeJob(m.Data())
			if err != nil {
				_ = m.Term()
				continue
			}
			if wait := time.Duration(j.Due-now()) * time.Millisecond; wait > 0 {
				_ = m.NakWithDelay(wait)
				continue
			}
			j.Due = 0
			if err := n.publish(ctx, n.subject, j); err != nil {
				_ = m.NakWithDelay(time.Second)
				continue
			}
			_ = m.Ack()
		}
	}
}

// Receive implements Driver.
func (n *NATS) Receive(ctx context.Context, max int) ([]*Delivery, error) {
	for {
		if n.nc.IsClosed() {
			return nil, ErrClosed
		}
		msgs, err := fetch(ctx, n.queue, max)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			continue
		}
		ds := make([]*Delivery, 0, len(msgs))
		for _, m := range msgs {
			j, err := decodeJob(m.Data())
			if err != nil {
				j = &Job{ID: "undecodable", Attempt: 1 << 20, Payload: string(m.Data()), Error: err.Error()}
			}
			if meta, err := m.Metadata(); err == nil && meta.NumDelivered > 1 {
				j.Attempt += int(meta.NumDelivered - 1)
			}
			ds = append(ds, &Delivery{Job: j, ref: m})
		}
		return ds, nil
	}
}

// Ack implements Driver. The acknowledgement is sent without waiting for the server's
// confirmation: should it be lost, the job runs again after the ack wait (at least once).
func (n *NATS) Ack(_ context.Context, d *Delivery) error {
	return d.ref.(jetstream.Msg).Ack()
}

// Retry implements Driver: the next attempt is stored before this one is acknowledged.
func (n *NATS) Retry(ctx context.Context, d *Delivery, next *Job) error {
	if err := n.Push(ctx, next); err != nil {
		return err
	}
	return d.ref.(jetstream.Msg).DoubleAck(ctx)
}

// Release implements Driver: the job is published again under a message id of its own (its
// first one may still be in the deduplication window), then the message received is
// acknowledged.
func (n *NATS) Release(ctx context.Context, d *Delivery) error {
	m := d.ref.(jetstream.Msg)
	j := *d.Job
	if meta, err := m.Metadata(); err == nil && meta.NumDelivered > 1 {
		j.Attempt -= int(meta.NumDelivered - 1)
	}
	if err := n.publishID(ctx, n.subject, &j, j.ID+".released."+newID()); err != nil {
		return err
	}
	return m.DoubleAck(ctx)
}

// Bury implements Driver.
func (n *NATS) Bury(ctx context.Context, d *Delivery, keep bool) error {
	if keep {
		if err := n.publish(ctx, n.subject+".dead", d.Job); err != nil {
			return err
		}
	}
	return d.ref.(jetstream.Msg).DoubleAck(ctx)
}

// Revive implements Driver.
func (n *NATS) Revive(ctx context.Context) (int, error) {
	count := 0
	for {
		info, err := n.dead.Info(ctx)
		if err != nil {
			return count, err
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return count, nil
		}
		msgs, err := fetch(ctx, n.dead, 100)
		if err != nil {
			return count, err
		}
		if len(msgs) == 0 && info.NumPending == 0 {
			return count, nil // the rest is being revived by someone else
		}
		for _, m := range msgs {
			j, err := decodeJob(m.Data())
			if err != nil {
				_ = m.Term()
				continue
			}
			j.Attempt, j.Error, j.Due, j.Pushed = 1, "", 0, now()
			// A message id of its own: the first push's may still be in the deduplication window.
			if err := n.publishID(ctx, n.subject, j, j.ID+".revived."+newID()); err != nil {
				return count, err
			}
			if err := m.DoubleAck(ctx); err != nil {
				return count, err
			}
			count++
		}
	}
}

// Stats implements Driver.
func (n *NATS) Stats(ctx context.Context) (Stats, error) {
	q, err := n.queue.Info(ctx)
	if err != nil {
		return Stats{}, err
	}
	dl, err := n.delayed.Info(ctx)
	if err != nil {
		return Stats{}, err
	}
	dd, err := n.dead.Info(ctx)
	if err != nil {
		return Stats{}, err
	}
	return Stats{Queued: int64(q.NumPending), Running: int64(q.NumAckPending),
		Delayed: int64(dl.NumPending) + int64(dl.NumAckPending), Dead: int64(dd.NumPending) + int64(dd.NumAckPending)}, nil
}

// Close implements Driver.
func (n *NATS) Close() error {
	n.closeOnce.Do(func() {
		n.stop()
		<-n.moverDone
		n.nc.Close()
	})
	return nil
}

package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
//	STREAM_STARTED  subject peregrine.STREAM.started.SEQ  a marker per queue message (SEQ, its
//	                                                  sequence) begun on a consumer and not settled:
//	                                                  the runs begun; one per subject, deleted with
//	                                                  the settlement
//
// A job's attempt travels in the job; a job redelivered after its server died (its lease, the
// ack wait, expired: the server renews it with in-progress acknowledgements while it holds
// the job) adds the runs its marker counts, not the deliveries. Every publish carries a
// message id (job id, life, attempt, subject), so the deduplication window absorbs a move
// repeated after a crash between publish and ack, and no life or attempt of a job is taken
// for another's duplicate.
//
// A NATS outage longer than the lease stops every server's renewals at once: when NATS is back,
// the jobs still held are delivered again, to their own server as much as to the others. A
// server therefore never takes back a job it holds (it keeps their stream sequences: held; its
// renewals and settlement through the first delivery count for the message, JetStream knowing
// a message's acknowledgements by its stream sequence), and begins a job another server held
// (delivered again; or delivered as new, nats-server having lost its record of the delivery,
// with its marker stored) only once it has reached NATS without a failure for a whole lease
// (reachedSince), by when the living holders have renewed theirs; before that it gives the
// job back with a delay.
type NATS struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	opts    NATSOptions
	subject string
	queue   jetstream.Consumer
	delayed jetstream.Consumer
	dead    jetstream.Consumer
	deadS   jetstream.Stream // the dead letters, read and deleted one by one
	queueS  jetstream.Stream // the queue, asked whether a job is settled (acknowledged: gone)
	started jetstream.Stream // the markers of runs begun

	// reachedSince is when, in unix ms, this server's calls began to reach NATS again after its
	// last disconnection or failed call (or since NewNATS); 0 while they fail.
	reachedSince atomic.Int64

	mu   sync.Mutex          // guards held and begun
	held map[uint64]struct{} // the stream sequences of the jobs received here and not yet settled, given back or given up
	// begun is, during the wait after a start or a reconnection, the stream sequences of the
	// jobs whose marker was stored when it was read: begun on a server that may be alive. Nil
	// until read; read again after a disconnection.
	begun map[uint64]struct{}

	stop      context.CancelFunc
	moverDone chan struct{}
	closeOnce sync.Once
}

var _ Driver = (*NATS)(nil)

// NewNATS connects, creates or updates the streams and consumers, and starts the mover of
// delayed jobs.
func NewNATS(ctx context.Context, opts NATSOptions) (*NATS, error) {
	n := &NATS{opts: opts, subject: "peregrine." + opts.Stream, held: map[uint64]struct{}{}}
	// A server just started cannot tell a job whose server died from one whose server could
	// not renew it during an outage that has just ended: it waits a lease too.
	n.reachedSince.Store(now())
	nc, err := nats.Connect(opts.URL, nats.Name("peregrine"), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(*nats.Conn, error) {
			n.reachedSince.Store(0)
			n.mu.Lock()
			n.begun = nil
			n.mu.Unlock()
		}),
		nats.ReconnectHandler(func(*nats.Conn) { n.reachedSince.Store(now()) }))
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", opts.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	n.nc, n.js = nc, js
	consumer := func(stream, subject string, ackWait time.Duration) (jetstream.Consumer, error) {
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: stream, Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
		}); err != nil {
			return nil, fmt.Errorf("nats %s: stream %s: %w", opts.URL, stream, err)
		}
		// The delayed jobs are all pending acknowledgement (each NAKed until due): no limit, or
		// the first 10,000 would keep the consumer from receiving a job due sooner.
		pending := 10000
		if subject == n.subject+".delayed" {
			pending = -1
		}
		c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: natsConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1,
			MaxAckPending: pending,
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
	if err == nil {
		n.deadS, err = js.Stream(ctx, opts.Stream+"_DEAD")
	}
	if err == nil {
		n.queueS, err = js.Stream(ctx, opts.Stream)
	}
	if err == nil {
		// A marker outlives its job only when a server died holding it and no other received
		// the job since, or when its deletion (sent without waiting) was lost: a day bounds
		// them, and so how long RUNNING may count one too many.
		n.started, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: opts.Stream + "_STARTED", Subjects: []string{n.subject + ".started.*"}, Storage: jetstream.FileStorage,
			MaxMsgsPerSubject: 1, MaxAge: 24 * time.Hour,
		})
		if err != nil {
			err = fmt.Errorf("nats %s: stream %s_STARTED: %w", opts.URL, opts.Stream, err)
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

// publish publishes j to subject under the message id of its life, attempt and subject.
func (n *NATS) publish(ctx context.Context, subject string, j *Job) error {
	return n.publishID(ctx, subject, j, fmt.Sprintf("%s.%d.%d.%s", j.ID, j.Life, j.Attempt, subject))
}

func (n *NATS) publishID(ctx context.Context, subject string, j *Job, msgID string) error {
	data := j.encode()
	// The server's max_payload (1 MiB unless configured) bounds the job as stored, its JSON
	// and headers included: a payload near MaxPayload needs a larger one.
	if limit := n.nc.MaxPayload(); limit > 0 && int64(len(data)) > limit {
		return fmt.Errorf("%w: the job takes %d bytes as stored, over the NATS server's max_payload of %d", ErrTooLarge, len(data), limit)
	}
	_, err := n.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data}, jetstream.WithMsgID(msgID))
	n.reached(err)
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
			n.reached(err)
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
			if err := n.publish(ctx, n.subject, j); err != nil { // Due kept, for the queue age
				_ = m.NakWithDelay(time.Second)
				continue
			}
			_ = m.Ack()
		}
	}
}

// natsRef is a NATS delivery's handle: the message, its sequence in the queue stream, the runs
// begun on it before (on servers that died) and its marker's sequence in STREAM_STARTED.
type natsRef struct {
	msg     jetstream.Msg
	seq     uint64
	begun   int
	marker  uint64
	started bool
	again   bool // delivered before: a server that held it may still act on it
	// asked is when the fetch that received msg was sent: JetStream delivered it later, so no
	// other server can have received it before asked + the ack wait.
	asked time.Time
}

// sure reports whether ref's message is surely this server's alone: it was delivered for the
// first time (no server held it before) and its ack wait, counted from before its delivery, has
// not run out (with half of ReclaimGrace to spare), so no server received it since. The renewals
// do not extend it: JetStream does not confirm them.
func (n *NATS) sure(ref *natsRef) bool {
	return !ref.again && time.Since(ref.asked) < n.opts.Timeout+ReclaimGrace/2
}

// claim makes sure that no other server began or settled ref's job since this one received or
// began it, and that none will: past sure, it replaces the job's marker on the condition that
// it is still the one this server knows (JetStream's expected last sequence per subject), so
// that of two servers that hold the job (one stalled past its lease), one only begins it, and
// one only settles it. It returns ErrLeaseLost if another server came first.
func (n *NATS) claim(ctx context.Context, ref *natsRef, runs int) error {
	if n.sure(ref) {
		return nil
	}
	return n.mark(ctx, ref, runs, true)
}

// mark stores ref's marker, counting runs begun, and, when expect is set, only if ref.marker is
// still the last one of the job (0: none).
func (n *NATS) mark(ctx context.Context, ref *natsRef, runs int, expect bool) error {
	var opts []jetstream.PublishOpt
	if expect {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(ref.marker))
	}
	ack, err := n.js.Publish(ctx, n.markerSubject(ref.seq), []byte(strconv.Itoa(runs)), opts...)
	n.reached(err)
	if apiErr := (*jetstream.APIError)(nil); errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return ErrLeaseLost
	}
	if err != nil {
		return err
	}
	ref.marker = ack.Sequence // the one before is replaced (one per subject)
	if expect {
		// A settlement deletes its marker, after its acknowledgement: a job settled since shows
		// no marker, as one never begun does, but it is gone from the queue (work queue).
		_, err := n.queueS.GetMsg(ctx, ref.seq)
		n.reached(err)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			n.unmark(ctx, &Delivery{ref: ref})
			return ErrLeaseLost
		} else if err != nil {
			return err
		}
	}
	return nil
}

// runs is how many runs of ref's job have begun, this server's included.
func (ref *natsRef) runs() int {
	if ref.started {
		return ref.begun + 1
	}
	return ref.begun
}

func (n *NATS) markerSubject(seq uint64) string {
	return n.subject + ".started." + strconv.FormatUint(seq, 10)
}

// Receive implements Driver. A job delivered again is not received if this server holds it
// (it goes on here), nor, while this server has not reached NATS for a whole lease, if another
// server held it: it is given back until then.
func (n *NATS) Receive(ctx context.Context, max int) ([]*Delivery, error) {
	for {
		if n.nc.IsClosed() {
			return nil, ErrClosed
		}
		asked := time.Now()
		msgs, err := fetch(ctx, n.queue, max)
		if err != nil {
			n.reached(err)
			return nil, err
		}
		if len(msgs) == 0 {
			continue
		}
		n.reached(nil)
		ds := make([]*Delivery, 0, len(msgs))
		for _, m := range msgs {
			ref := &natsRef{msg: m, asked: asked}
			if meta, err := m.Metadata(); err == nil {
				ref.seq = meta.Sequence.Stream
				ref.again = meta.NumDelivered > 1
				if !n.hold(ref) {
					continue
				}
			}
			j, err := decodeJob(m.Data())
			if err != nil {
				j = &Job{ID: "undecodable", Attempt: 1 << 20, Payload: string(m.Data()), Error: err.Error()}
			}
			j.Attempt += ref.begun
			ds = append(ds, &Delivery{Job: j, ref: ref})
		}
		if len(ds) > 0 {
			return ds, nil
		}
	}
}

// hold decides whether this server takes ref and, if so, counts it among the jobs it holds.
// A job delivered again that this server holds is not taken back: JetStream delivered it again
// because an outage lost its renewals, and it goes on here, its first delivery's renewals and
// settlement counting for the message. Until this server has reached NATS for a whole lease
// (it just started, or an outage has just ended), it does not take a job another server may
// hold and not have renewed yet since the outage: one delivered again, or one begun (its
// marker stored: a nats-server killed may have lost its record of the delivery, and deliver
// it again as new). It gives it back until then, and for at least half a lease: the delay
// replaces the holder's renewal that reached NATS just before it, and the holder renews it
// twice meanwhile. A job taken over adds the runs its marker counts (begun on a server that
// died, or stalled).
func (n *NATS) hold(ref *natsRef) bool {
	lease := n.opts.Timeout + ReclaimGrace
	wait := n.untilReachedFor(lease)
	n.mu.Lock()
	_, mine := n.held[ref.seq]
	if !mine && !ref.again && wait == 0 { // the common path: a job delivered for the first time
		n.held[ref.seq] = struct{}{}
		n.begun = nil
		n.mu.Unlock()
		return true
	}
	n.mu.Unlock()
	if mine {
		return false
	}
	if wait > 0 && (ref.again || n.begunElsewhere(ref.seq)) {
		_ = ref.msg.NakWithDelay(max(wait, lease/2))
		return false
	}
	if ref.again {
		// Not cancelled with the receive: the job is taken, and its marker must be read.
		mk, err := n.started.GetLastMsgForSubject(context.Background(), n.markerSubject(ref.seq))
		n.reached(err)
		if err == nil {
			ref.begun, _ = strconv.Atoi(string(mk.Data))
			ref.marker = mk.Sequence
		}
	}
	n.mu.Lock()
	n.held[ref.seq] = struct{}{}
	n.mu.Unlock()
	return true
}

// begunElsewhere reports whether the job of stream sequence seq, not held here, had its marker
// stored when this server first looked since it started or reconnected: all the markers are
// read at once (the subjects of STREAM_STARTED), then kept until a disconnection. It reports
// true when they cannot be read.
func (n *NATS) begunElsewhere(seq uint64) bool {
	n.mu.Lock()
	begun := n.begun
	n.mu.Unlock()
	if begun == nil {
		info, err := n.started.Info(context.Background(), jetstream.WithSubjectFilter(n.subject+".started.*"))
		n.reached(err)
		if err != nil {
			return true
		}
		begun = make(map[uint64]struct{}, len(info.State.Subjects))
		for subject := range info.State.Subjects {
			if s, err := strconv.ParseUint(subject[strings.LastIndexByte(subject, '.')+1:], 10, 64); err == nil {
				begun[s] = struct{}{}
			}
		}
		n.mu.Lock()
		n.begun = begun
		n.mu.Unlock()
	}
	_, ok := begun[seq]
	return ok
}

// untilReachedFor returns how long it still takes until this server has reached NATS without a
// failure for d; 0 once it has.
func (n *NATS) untilReachedFor(d time.Duration) time.Duration {
	since := n.reachedSince.Load()
	if since == 0 {
		return d
	}
	return max(0, d-time.Duration(now()-since)*time.Millisecond)
}

// reached notes the outcome of a call that waited for NATS's answer: a failure to reach it (a
// timeout, no responders while JetStream starts again, a connection lost) restarts the wait
// before this server takes over other servers' jobs; an answer, an API error among them, ends a
// failure; any other error (the caller gave up, a message acknowledged twice) says nothing of
// NATS. A disconnection restarts the wait too, and a reconnection ends it (NewNATS's handlers).
func (n *NATS) reached(err error) {
	var apiErr *jetstream.APIError
	switch {
	case err == nil, errors.As(err, &apiErr) && apiErr.Code < 500:
		if n.reachedSince.Load() == 0 {
			n.reachedSince.CompareAndSwap(0, now())
		}
	case apiErr != nil, // JetStream unavailable (503): starting again after a restart
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrStaleConnection), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrServerShutdown), errors.Is(err, jetstream.ErrNoHeartbeat):
		n.reachedSince.Store(0)
	}
}

// forget is called once ref is settled, given back, or given up by the pipeline (its Start or
// its settlement failed): should the job still be pending, it runs once its lease expires,
// here or elsewhere.
func (n *NATS) forget(ref *natsRef) {
	if ref.seq == 0 {
		return
	}
	n.mu.Lock()
	delete(n.held, ref.seq)
	n.mu.Unlock()
}

// Start implements Driver: the marker stored. JetStream cannot say whether another server
// received the job since; past sure, the marker is stored only if no other server began or
// settled the job since this one received it (ErrLeaseLost otherwise).
func (n *NATS) Start(ctx context.Context, d *Delivery) error {
	ref := d.ref.(*natsRef)
	if err := n.mark(ctx, ref, ref.begun+1, !n.sure(ref)); err != nil {
		n.forget(ref)
		return err
	}
	ref.started = true
	return nil
}

// Renew implements Driver: an in-progress acknowledgement per job restarts its ack wait.
func (n *NATS) Renew(_ context.Context, ds []*Delivery) ([]*Delivery, error) {
	var errs []error
	for _, d := range ds {
		errs = append(errs, d.ref.(*natsRef).msg.InProgress())
	}
	return nil, errors.Join(errs...)
}

// unmark deletes d's marker, once d is settled, without waiting for JetStream's answer (a
// round trip per job): a marker left behind (the request lost) only counts as running until
// it expires, and is replaced if the job is received again.
func (n *NATS) unmark(_ context.Context, d *Delivery) {
	if ref := d.ref.(*natsRef); ref.marker != 0 {
		req := fmt.Sprintf(`{"seq":%d,"no_erase":true}`, ref.marker)
		_ = n.nc.Publish("$JS.API.STREAM.MSG.DELETE."+n.opts.Stream+"_STARTED", []byte(req))
	}
}

// Ack implements Driver. The acknowledgement is sent without waiting for the server's
// confirmation: should it be lost, the job runs again after the ack wait (at least once).
func (n *NATS) Ack(ctx context.Context, d *Delivery) error {
	ref := d.ref.(*natsRef)
	defer n.forget(ref)
	if err := n.claim(ctx, ref, ref.runs()); err != nil {
		return err
	}
	err := ref.msg.Ack()
	n.unmark(ctx, d)
	return err
}

// Retry implements Driver: the next attempt is stored before this one is acknowledged.
func (n *NATS) Retry(ctx context.Context, d *Delivery, next *Job) error {
	ref := d.ref.(*natsRef)
	defer n.forget(ref)
	if err := n.claim(ctx, ref, ref.runs()); err != nil {
		return err
	}
	if err := n.Push(ctx, next); err != nil {
		return err
	}
	err := ref.msg.DoubleAck(ctx)
	n.reached(err)
	n.unmark(ctx, d)
	return err
}

// Release implements Driver: the job is published again under a message id of its own (its
// first one may still be in the deduplication window), then the message received is
// acknowledged. Its attempt keeps the runs begun that died.
func (n *NATS) Release(ctx context.Context, d *Delivery) error {
	ref := d.ref.(*natsRef)
	defer n.forget(ref)
	if err := n.claim(ctx, ref, ref.runs()); err != nil {
		return err
	}
	j := *d.Job
	if err := n.publishID(ctx, n.subject, &j, j.ID+".released."+newID()); err != nil {
		return err
	}
	err := ref.msg.DoubleAck(ctx)
	n.reached(err)
	n.unmark(ctx, d)
	return err
}

// Bury implements Driver.
func (n *NATS) Bury(ctx context.Context, d *Delivery, keep bool) error {
	ref := d.ref.(*natsRef)
	defer n.forget(ref)
	if err := n.claim(ctx, ref, ref.runs()); err != nil {
		return err
	}
	if keep {
		if err := n.publish(ctx, n.subject+".dead", d.Job); err != nil {
			return err
		}
	}
	err := ref.msg.DoubleAck(ctx)
	n.reached(err)
	n.unmark(ctx, d)
	return err
}

// deadLetters calls f with each dead letter and its sequence, oldest first, until f returns
// false. Dead letters are read by sequence, not through a consumer: listing takes none.
func (n *NATS) deadLetters(ctx context.Context, f func(seq uint64, e deadEntry) bool) error {
	info, err := n.deadS.Info(ctx)
	if err != nil {
		return err
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := n.deadS.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted
		}
		if err != nil {
			return err
		}
		if !f(seq, deadEntry{raw: string(m.Data), fallback: "undecodable-" + strconv.FormatUint(seq, 10)}) {
			return nil
		}
	}
	return nil
}

// revive publishes dead letter seq back to the queue, then deletes it. Two servers reviving
// it at once publish the same message id (its next life's): JetStream keeps one.
func (n *NATS) revive(ctx context.Context, seq uint64, j *Job) error {
	if err := n.publish(ctx, n.subject, j.revived()); err != nil {
		return err
	}
	if err := n.deadS.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	return nil
}

// Revive implements Driver.
func (n *NATS) Revive(ctx context.Context) (int, error) {
	count := 0
	var rerr error
	err := n.deadLetters(ctx, func(seq uint64, e deadEntry) bool {
		if rerr = n.revive(ctx, seq, e.job()); rerr == nil {
			count++
		}
		return rerr == nil
	})
	return count, errors.Join(err, rerr)
}

// DeadLetters implements Driver.
func (n *NATS) DeadLetters(ctx context.Context, limit, maxPayload int) ([]*Job, error) {
	return listDead(ctx, n.deadLetters, limit, maxPayload)
}

// DeadLetter implements Driver.
func (n *NATS) DeadLetter(ctx context.Context, id string) (*Job, error) {
	_, j, err := findDead(ctx, n.deadLetters, id)
	return j, err
}

// ReviveOne implements Driver.
func (n *NATS) ReviveOne(ctx context.Context, id string) error {
	seq, j, err := findDead(ctx, n.deadLetters, id)
	if err != nil {
		return err
	}
	return n.revive(ctx, seq, j)
}

// DeleteDead implements Driver.
func (n *NATS) DeleteDead(ctx context.Context, id string) error {
	seq, _, err := findDead(ctx, n.deadLetters, id)
	if err != nil {
		return err
	}
	err = n.deadS.DeleteMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) { // deleted or revived by another server first
		err = ErrNoSuchJob
	}
	return err
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
	dd, err := n.deadS.Info(ctx)
	if err != nil {
		return Stats{}, err
	}
	st, err := n.started.Info(ctx)
	if err != nil {
		return Stats{}, err
	}
	running := int64(st.State.Msgs)
	return Stats{Queued: max(0, int64(q.NumPending)+int64(q.NumAckPending)-running), Running: running,
		Delayed: int64(dl.NumPending) + int64(dl.NumAckPending), Dead: int64(dd.State.Msgs)}, nil
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

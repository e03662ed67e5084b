// Command sharecheck drives franz-go share consumers (KIP-932: ShareGroupHeartbeat,
// ShareFetch, ShareAcknowledge) against a broker, for tests/test_share_clients.py.
//
// It sets the group config share.auto.offset.reset=earliest on --group
// (IncrementalAlterConfigs on a GROUP resource, until DescribeConfigs reads it back),
// starts the share consumers subscribed to --topic (which must exist), and only
// then produces --records records with keys and values k0..k<N-1>, in batches
// while the consumers poll, so that every member of the group can get some.
//
// Modes:
//
//	consume  --clients C share consumers in the one group. Records are accepted
//	         implicitly (franz-go accepts the previous poll's records on the next
//	         poll; at the end MarkAcks(AckAccept) + FlushAcks). Done once every key
//	         arrived.
//	release  one share consumer acknowledging every record explicitly: on first
//	         delivery key index i%3==0 is RELEASEd, i%5==1 (and not i%3==0)
//	         REJECTed, the rest ACCEPTed; a redelivered record is ACCEPTed. Done
//	         once every key arrived and every released one came back.
//
// After that every consumer flushes its acks and keeps polling for --quiet-ms
// (whatever arrives then counts too: a duplicate or an unexpected redelivery).
// Then it waits (bounded) for DescribeShareGroupOffsets to show lag 0 on every
// partition, closes the consumers (leaving the group) and waits (bounded) for
// ShareGroupDescribe to show the group Empty.
//
// It prints one JSON line on stdout (the tests assert on it) and exits 0, or 1
// when --timeout-s ran out or something failed ("ok": false, "error": ...).
// The clients' log goes to stderr (every request with --debug).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type delivery struct {
	key    int
	client int
	count  int32
	part   int32
	offset int64
}

type state struct {
	mu         sync.Mutex
	mode       string
	n          int
	deliveries []delivery
	seen       map[int]int // key -> times delivered
	released   map[int]bool
	rejected   map[int]bool
	accepted1  int
	redeliv    map[int]bool // released keys delivered again
	unexpected []string
	ackErrors  []string
	fetchErrs  []string
	done       chan struct{}
	doneOnce   sync.Once
	finished   bool
}

func (s *state) checkDone() {
	distinct := len(s.seen)
	complete := distinct == s.n
	if s.mode == "release" {
		complete = complete && len(s.redeliv) == len(s.released)
	}
	if complete {
		s.doneOnce.Do(func() { close(s.done) })
	}
}

func main() {
	bootstrap := flag.String("bootstrap", "", "broker address host:port (required)")
	mode := flag.String("mode", "consume", "consume | release")
	topic := flag.String("topic", "", "topic (must exist)")
	group := flag.String("group", "", "share group id")
	records := flag.Int("records", 100, "records to produce")
	clients := flag.Int("clients", 2, "share consumers (consume mode)")
	quietMs := flag.Int("quiet-ms", 1500, "keep polling this long after completion")
	timeoutS := flag.Int("timeout-s", 40, "overall deadline")
	debug := flag.Bool("debug", false, "client log at debug level")
	flag.Parse()
	if *bootstrap == "" || *topic == "" || *group == "" || (*mode != "consume" && *mode != "release") {
		fmt.Fprintln(os.Stderr, "usage: sharecheck --bootstrap H:P --mode consume|release --topic T --group G [--records N] [--clients C] [--quiet-ms MS] [--timeout-s S] [--debug]")
		os.Exit(2)
	}
	if *mode == "release" {
		*clients = 1
	}
	level := kgo.LogLevelInfo
	if *debug {
		level = kgo.LogLevelDebug
	}
	out := map[string]any{"mode": *mode}
	err := run(out, *bootstrap, *mode, *topic, *group, *records, *clients,
		time.Duration(*quietMs)*time.Millisecond, time.Duration(*timeoutS)*time.Second, level)
	out["ok"] = err == nil
	if err != nil {
		out["error"] = err.Error()
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	if err != nil {
		os.Exit(1)
	}
}

func logger(name string, level kgo.LogLevel) kgo.Logger {
	return kgo.BasicLogger(os.Stderr, level, func() string { return time.Now().Format("15:04:05.000 ") + name + " " })
}

// fenceCounter passes everything to its logger and counts the heartbeats that came back
// FENCED_MEMBER_EPOCH (franz-go logs each one, then drops its assignment and rejoins).
type fenceCounter struct {
	kgo.Logger
	mu    sync.Mutex
	count int
}

func (f *fenceCounter) Level() kgo.LogLevel {
	return max(f.Logger.Level(), kgo.LogLevelInfo)
}

func (f *fenceCounter) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if strings.Contains(msg, "lost membership") {
		for _, kv := range keyvals {
			if err, ok := kv.(error); ok && errors.Is(err, kerr.FencedMemberEpoch) {
				f.mu.Lock()
				f.count++
				f.mu.Unlock()
			}
		}
	}
	if level <= f.Logger.Level() {
		f.Logger.Log(level, msg, keyvals...)
	}
}

func (f *fenceCounter) fenced() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count
}

func setEarliest(ctx context.Context, cl *kgo.Client, group string) (map[string]string, error) {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name = "share.auto.offset.reset"
	c.Op = kmsg.IncrementalAlterConfigOpSet
	c.Value = kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("IncrementalAlterConfigs: %w", err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return nil, fmt.Errorf("IncrementalAlterConfigs %s: %w (%v)", r.ResourceName, err, r.ErrorMessage)
		}
	}
	// Kafka applies group configs asynchronously: read back until the value shows.
	for {
		dreq := kmsg.NewPtrDescribeConfigsRequest()
		dres := kmsg.NewDescribeConfigsRequestResource()
		dres.ResourceType = kmsg.ConfigResourceTypeGroupConfig
		dres.ResourceName = group
		dreq.Resources = append(dreq.Resources, dres)
		dresp, err := dreq.RequestWith(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("DescribeConfigs: %w", err)
		}
		got := map[string]string{}
		for _, r := range dresp.Resources {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				return nil, fmt.Errorf("DescribeConfigs %s: %w", r.ResourceName, err)
			}
			for _, c := range r.Configs {
				if strings.HasPrefix(c.Name, "share.") && c.Value != nil {
					got[c.Name] = *c.Value
				}
			}
		}
		if got["share.auto.offset.reset"] == "earliest" {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, fmt.Errorf("share.auto.offset.reset never described as earliest: %v", got)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func run(out map[string]any, bootstrap, mode, topic, group string, n, nclients int,
	quiet, timeout time.Duration, level kgo.LogLevel) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()

	admCl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.WithLogger(logger("admin", level)),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	cfgs, err := setEarliest(ctx, admCl, group)
	if err != nil {
		return err
	}
	out["group_configs"] = cfgs

	s := &state{mode: mode, n: n, seen: map[int]int{}, released: map[int]bool{}, rejected: map[int]bool{},
		redeliv: map[int]bool{}, done: make(chan struct{})}

	cls := make([]*kgo.Client, nclients)
	fences := make([]*fenceCounter, nclients)
	for i := range cls {
		idx := i
		fences[i] = &fenceCounter{Logger: logger(fmt.Sprintf("share-%d", i), level)}
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(bootstrap),
			kgo.ClientID(fmt.Sprintf("sharecheck-%s-%d", mode, i)),
			kgo.ConsumeTopics(topic),
			kgo.ShareGroup(group),
			kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
				for _, r := range rs {
					if r.Err != nil {
						s.mu.Lock()
						s.ackErrors = append(s.ackErrors, fmt.Sprintf("client %d %s-%d: %v", idx, r.Topic, r.Partition, r.Err))
						s.mu.Unlock()
					}
				}
			}),
			kgo.WithLogger(fences[i]),
		)
		if err != nil {
			return err
		}
		cls[i] = cl
	}
	closed := false
	closeAll := func() {
		if closed {
			return
		}
		closed = true
		var wg sync.WaitGroup
		for _, cl := range cls {
			wg.Add(1)
			go func(cl *kgo.Client) { defer wg.Done(); cl.Close() }(cl)
		}
		wg.Wait()
	}
	defer closeAll()

	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Add(1)
		go func() { defer wg.Done(); consume(ctx, s, i, cl, quiet) }()
	}

	// Produce in batches while the consumers poll.
	perBatch := max(1, n/10)
	for i := 0; i < n; i += perBatch {
		var rs []*kgo.Record
		for k := i; k < min(n, i+perBatch); k++ {
			v := "k" + strconv.Itoa(k)
			rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(v), Value: []byte(v)})
		}
		if err := admCl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		select {
		case <-s.done:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}

	waitErr := error(nil)
	select {
	case <-s.done:
	case <-ctx.Done():
		waitErr = fmt.Errorf("timed out waiting for the records: %w", ctx.Err())
		s.doneOnce.Do(func() { close(s.done) })
	}
	wg.Wait()
	out["received_after_ms"] = time.Since(start).Milliseconds()

	// Offsets: lag 0 on every partition once every acknowledgement landed.
	var lastOffsets map[string]any
	if waitErr == nil {
		for {
			lastOffsets, err = describeOffsets(ctx, adm, group, topic)
			if err == nil && lastOffsets["all_lag_0"] == true {
				break
			}
			if ctx.Err() != nil {
				waitErr = fmt.Errorf("lag never 0: %v %v", lastOffsets, err)
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	if waitErr != nil && lastOffsets == nil {
		// For the report: where the share partitions stand (a fresh deadline: ctx is done).
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		lastOffsets, err = describeOffsets(dctx, adm, group, topic)
		dcancel()
		if err != nil {
			lastOffsets = map[string]any{"error": err.Error()}
		}
	}
	out["offsets"] = lastOffsets

	if waitErr == nil {
		d, err := adm.DescribeShareGroups(ctx, group)
		if err == nil {
			g := d[group]
			var members []map[string]any
			for _, m := range g.Members {
				members = append(members, map[string]any{"client_id": m.ClientID, "assignment": assignment(m.Assignment)})
			}
			out["group_while_members"] = map[string]any{"state": g.GroupState, "members": members, "err": errStr(g.Err)}
		}
	}
	closeAll()
	if waitErr == nil {
		for {
			d, err := adm.DescribeShareGroups(ctx, group)
			var g kadm.DescribedShareGroup
			if err == nil {
				g = d[group]
				out["group_after_close"] = map[string]any{"state": g.GroupState, "members": len(g.Members), "err": errStr(g.Err)}
			}
			if err == nil && g.GroupState == "Empty" {
				break
			}
			if ctx.Err() != nil {
				waitErr = fmt.Errorf("group never Empty after close: %v", err)
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	}

	fenced := 0
	for _, f := range fences {
		fenced += f.fenced()
	}
	out["heartbeats_fenced"] = fenced
	s.mu.Lock()
	defer s.mu.Unlock()
	summarize(out, s, nclients)
	return waitErr
}

func consume(ctx context.Context, s *state, idx int, cl *kgo.Client, quiet time.Duration) {
	poll := func() {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollRecords(pctx, 200)
		cancel()
		for _, fe := range fs.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				continue
			}
			s.mu.Lock()
			s.fetchErrs = append(s.fetchErrs, fmt.Sprintf("client %d %s-%d: %v", idx, fe.Topic, fe.Partition, fe.Err))
			s.mu.Unlock()
		}
		fs.EachRecord(func(r *kgo.Record) {
			k, err := strconv.Atoi(strings.TrimPrefix(string(r.Key), "k"))
			s.mu.Lock()
			defer s.mu.Unlock()
			if err != nil {
				s.unexpected = append(s.unexpected, "bad key "+string(r.Key))
				return
			}
			dc := r.DeliveryCount()
			s.deliveries = append(s.deliveries, delivery{key: k, client: idx, count: dc, part: r.Partition, offset: r.Offset})
			s.seen[k]++
			if s.mode == "release" {
				switch {
				case dc == 1 && s.seen[k] == 1 && k%3 == 0:
					s.released[k] = true
					r.Ack(kgo.AckRelease)
				case dc == 1 && s.seen[k] == 1 && k%5 == 1:
					s.rejected[k] = true
					r.Ack(kgo.AckReject)
				case dc == 1 && s.seen[k] == 1:
					s.accepted1++
					r.Ack(kgo.AckAccept)
				case s.released[k] && !s.redeliv[k] && dc == 2:
					s.redeliv[k] = true
					r.Ack(kgo.AckAccept)
				default:
					s.unexpected = append(s.unexpected, fmt.Sprintf("k%d delivery %d count %d", k, s.seen[k], dc))
					r.Ack(kgo.AckAccept)
				}
			}
			s.checkDone()
		})
	}
	for {
		select {
		case <-s.done:
		default:
			if ctx.Err() != nil {
				return
			}
			poll()
			continue
		}
		break
	}
	flush := func() {
		cl.MarkAcks(kgo.AckAccept) // the last poll's records not acknowledged yet
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := cl.FlushAcks(fctx); err != nil {
			s.mu.Lock()
			s.ackErrors = append(s.ackErrors, fmt.Sprintf("client %d FlushAcks: %v", idx, err))
			s.mu.Unlock()
		}
		cancel()
	}
	flush()
	if ctx.Err() != nil {
		return
	}
	deadline := time.Now().Add(quiet)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		poll()
	}
	flush()
}

func describeOffsets(ctx context.Context, adm *kadm.Client, group, topic string) (map[string]any, error) {
	d, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	g := d[group]
	if g.Err != nil {
		return nil, g.Err
	}
	parts := map[string]any{}
	all0 := len(g.Offsets[topic]) > 0
	for p, o := range g.Offsets[topic] {
		parts[strconv.Itoa(int(p))] = map[string]any{"start": o.StartOffset, "lag": o.Lag, "err": errStr(o.Err)}
		if o.Lag != 0 || o.Err != nil {
			all0 = false
		}
	}
	return map[string]any{"partitions": parts, "all_lag_0": all0}, nil
}

func assignment(ts kadm.TopicsSet) []string {
	var out []string
	for t, ps := range ts {
		for p := range ps {
			out = append(out, fmt.Sprintf("%s-%d", t, p))
		}
	}
	sort.Strings(out)
	return out
}

func errStr(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}

func summarize(out map[string]any, s *state, nclients int) {
	counts := map[string]int{}
	perClient := map[string]int{}
	for _, d := range s.deliveries {
		counts[strconv.Itoa(int(d.count))]++
		perClient[strconv.Itoa(d.client)]++
	}
	for i := 0; i < nclients; i++ {
		if _, ok := perClient[strconv.Itoa(i)]; !ok {
			perClient[strconv.Itoa(i)] = 0
		}
	}
	dups := 0
	for _, c := range s.seen {
		if c > 1 {
			dups += c - 1
		}
	}
	var missing []int
	for k := 0; k < s.n; k++ {
		if s.seen[k] == 0 {
			missing = append(missing, k)
		}
	}
	out["deliveries"] = len(s.deliveries)
	out["distinct"] = len(s.seen)
	out["missing"] = missing
	out["delivery_counts"] = counts
	out["per_client"] = perClient
	out["ack_errors"] = s.ackErrors
	out["fetch_errors"] = s.fetchErrs
	out["unexpected"] = s.unexpected
	if s.mode == "consume" {
		out["duplicates"] = dups
	} else {
		out["released"] = len(s.released)
		out["rejected"] = len(s.rejected)
		out["accepted_first"] = s.accepted1
		out["redelivered"] = len(s.redeliv)
	}
}

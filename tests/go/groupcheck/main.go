// Command groupcheck is one franz-go consumer-group member, driven by
// tests/test_franz_go_groups.py.
//
// It joins --group (classic protocol) consuming --topic with the chosen
// --balancer (range | cooperative-sticky), auto-commit disabled. After every
// poll it appends one "partition offset value" line per record to --out,
// flushes the file, and commits the polled offsets synchronously
// (CommitUncommittedOffsets; a failed commit is retried after the next poll).
// Rebalances are blocked while a polled batch is processed
// (BlockRebalanceOnPoll), and OnPartitionsRevoked commits whatever is still
// uncommitted, so a partition is handed over only after its processed records
// are committed.
//
// Events go to --out.log, one per line, in the same format as the librdkafka
// member in tests/test_librdkafka_groups.py: STARTED, ASSIGN [p,...],
// REVOKE [...], LOST [...], COMMIT, COMMITERR <error>, FETCHERR <error>,
// CLOSED. The client's own log (errors seen on heartbeats, joins, commits;
// every request with --debug) goes to stderr.
//
// It stops, committing and leaving the group cleanly (Close sends LeaveGroup),
// when the file --out.stop appears, on SIGTERM/SIGINT, or after --max-seconds.
// Exit status: 0 after a clean stop, 1 on a fatal error, 2 on bad usage.
//
// With --mode offsetdelete it instead checks OffsetDelete (kadm.DeleteOffsets)
// on --group/--topic and exits 0 with a PASS line or 1 with a FAIL line.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	bootstrap := flag.String("bootstrap", "", "broker address host:port (required)")
	group := flag.String("group", "", "consumer group id (required)")
	topic := flag.String("topic", "", "topic to consume (required)")
	out := flag.String("out", "", "file to append processed records to (required for --mode member)")
	balancer := flag.String("balancer", "range", "range | cooperative-sticky")
	maxSeconds := flag.Int("max-seconds", 240, "exit (cleanly) after this many seconds")
	debug := flag.Bool("debug", false, "log every request at debug level to stderr")
	mode := flag.String("mode", "member", "member | offsetdelete")
	flag.Parse()
	if *bootstrap == "" || *group == "" || *topic == "" || (*mode == "member" && *out == "") {
		fmt.Fprintln(os.Stderr, "usage: groupcheck --bootstrap H:P --group G --topic T --out FILE [--balancer range|cooperative-sticky] [--max-seconds N] [--debug] [--mode member|offsetdelete]")
		os.Exit(2)
	}
	level := kgo.LogLevelInfo
	if *debug {
		level = kgo.LogLevelDebug
	}
	logger := kgo.BasicLogger(os.Stderr, level, func() string { return time.Now().Format("15:04:05.000 ") })

	switch *mode {
	case "member":
		var bal kgo.GroupBalancer
		switch *balancer {
		case "range":
			bal = kgo.RangeBalancer()
		case "cooperative-sticky":
			bal = kgo.CooperativeStickyBalancer()
		default:
			fmt.Fprintf(os.Stderr, "unknown --balancer %q\n", *balancer)
			os.Exit(2)
		}
		os.Exit(runMember(*bootstrap, *group, *topic, *out, bal, time.Duration(*maxSeconds)*time.Second, logger))
	case "offsetdelete":
		if err := checkOffsetDelete(*bootstrap, *group, *topic, logger); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL offsetdelete: %v\n", err)
			os.Exit(1)
		}
		fmt.Println("PASS offsetdelete")
	default:
		fmt.Fprintf(os.Stderr, "unknown --mode %q\n", *mode)
		os.Exit(2)
	}
}

// events writes the --out.log event lines; safe from the rebalance callbacks.
type events struct {
	mu sync.Mutex
	f  *os.File
}

func (e *events) note(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.f, format+"\n", args...)
}

// parts formats a partition set like Python's json.dumps(sorted(list)).
func parts(m map[string][]int32, topic string) string {
	ps := append([]int32(nil), m[topic]...)
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func errName(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return strings.ReplaceAll(err.Error(), " ", "_")
}

func runMember(bootstrap, group, topic, out string, bal kgo.GroupBalancer, maxDur time.Duration, logger kgo.Logger) int {
	ef, err := os.OpenFile(out+".log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ev := &events{f: ef}
	of, err := os.OpenFile(out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := bufio.NewWriter(of)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, maxDur)
	defer cancel()

	commit := func(ctx context.Context, cl *kgo.Client, why string) {
		unc := cl.UncommittedOffsets()
		if len(unc) == 0 {
			return
		}
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		if err := cl.CommitUncommittedOffsets(cctx); err != nil {
			ev.note("COMMITERR %s %s: %v", errName(err), why, err)
			return
		}
		var s []string
		for p, o := range unc[topic] {
			s = append(s, fmt.Sprintf("%d:%d", p, o.Offset))
		}
		sort.Strings(s)
		ev.note("COMMIT %s", strings.Join(s, " "))
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ClientID("groupcheck"),
		kgo.WithLogger(logger),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(bal),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(6*time.Second),
		kgo.HeartbeatInterval(time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			ev.note("ASSIGN %s", parts(m, topic))
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			ev.note("REVOKE %s", parts(m, topic))
			// Everything polled has been processed (rebalances wait for AllowRebalance).
			commit(ctx, cl, "on-revoke")
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			ev.note("LOST %s", parts(m, topic))
		}),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ev.note("STARTED %d", os.Getpid())

	stopFile := out + ".stop"
	rc := 0
	for ctx.Err() == nil {
		if _, err := os.Stat(stopFile); err == nil {
			break
		}
		pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fetches := cl.PollRecords(pctx, 500)
		pcancel()
		if fetches.IsClientClosed() {
			ev.note("FETCHERR client_closed")
			rc = 1
			break
		}
		fatal := false
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			ev.note("FETCHERR %s %s[%d]: %v", errName(err), t, p, err)
			if errors.Is(err, kerr.FencedInstanceID) {
				fatal = true
			}
		})
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			fmt.Fprintf(w, "%d %d %s\n", r.Partition, r.Offset, r.Value)
			n++
		})
		if err := w.Flush(); err != nil { // lines reach the OS before the commit
			ev.note("FATAL write: %v", err)
			rc = 1
			break
		}
		commit(context.Background(), cl, "after-poll")
		cl.AllowRebalance()
		if fatal {
			rc = 1
			break
		}
	}
	commit(context.Background(), cl, "on-stop")
	cl.CloseAllowingRebalance() // sends LeaveGroup (no instance id)
	ev.note("CLOSED")
	return rc
}

// checkOffsetDelete exercises OffsetDelete (API 47): on an Empty group a
// partition's commit is removed and the others stay; while a member is
// subscribed to the topic the broker refuses with GROUP_SUBSCRIBED_TO_TOPIC;
// for a group that does not exist it answers GROUP_ID_NOT_FOUND.
func checkOffsetDelete(bootstrap, group, topic string, logger kgo.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.WithLogger(logger))
	if err != nil {
		return err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	offs := kadm.Offsets{}
	for p := int32(0); p < 3; p++ {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: int64(p) + 1, LeaderEpoch: -1, Metadata: fmt.Sprintf("m%d", p)})
	}
	cr, err := adm.CommitOffsets(ctx, group, offs)
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if err := cr.Error(); err != nil {
		return fmt.Errorf("commit partition error: %w", err)
	}
	dr, err := adm.DeleteOffsets(ctx, group, kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		return fmt.Errorf("delete offsets (empty group): %w", err)
	}
	if err := dr.Error(); err != nil {
		return fmt.Errorf("delete offsets (empty group) partition error: %w", err)
	}
	fr, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	if _, ok := fr.Lookup(topic, 0); ok {
		return fmt.Errorf("partition 0 still committed after OffsetDelete: %v", fr)
	}
	for p := int32(1); p < 3; p++ {
		o, ok := fr.Lookup(topic, p)
		if !ok || o.Err != nil || o.At != int64(p)+1 || o.Metadata != fmt.Sprintf("m%d", p) {
			return fmt.Errorf("partition %d after deleting partition 0: %+v (found %v)", p, o, ok)
		}
	}
	fmt.Println("ok: OffsetDelete on an Empty group removed partition 0 only")

	// A member subscribed to the topic: deleting its offsets is refused.
	member, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.WithLogger(logger), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(), kgo.SessionTimeout(6*time.Second))
	if err != nil {
		return err
	}
	defer member.Close()
	for {
		dg, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return fmt.Errorf("describe: %w", err)
		}
		if g := dg[group]; g.State == "Stable" && len(g.Members) == 1 {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("group never became Stable with the member: %+v", dg[group])
		}
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		member.PollFetches(pctx)
		pcancel()
	}
	dr, err = adm.DeleteOffsets(ctx, group, kadm.TopicsSet{topic: {1: {}}})
	if err != nil {
		return fmt.Errorf("delete offsets (subscribed): request error %w", err)
	}
	if err := dr.Error(); !errors.Is(err, kerr.GroupSubscribedToTopic) {
		return fmt.Errorf("delete offsets of a subscribed topic: got %v, want GROUP_SUBSCRIBED_TO_TOPIC", err)
	}
	fmt.Println("ok: OffsetDelete while subscribed -> GROUP_SUBSCRIBED_TO_TOPIC")
	member.Close()

	_, err = adm.DeleteOffsets(ctx, group+"-never-existed", kadm.TopicsSet{topic: {0: {}}})
	if !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("delete offsets of an unknown group: got %v, want GROUP_ID_NOT_FOUND", err)
	}
	fmt.Println("ok: OffsetDelete on an unknown group -> GROUP_ID_NOT_FOUND")
	return nil
}

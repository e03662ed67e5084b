// Command clientcheck drives a Kafka-compatible broker with the franz-go client
// (kgo for producing/consuming, kadm for admin requests) and checks that every
// answer is what Apache Kafka would give.
//
// For each compression codec (none, gzip, snappy, lz4, zstd) it:
//
//  1. creates a topic with 3 partitions and RF 1 (kadm CreateTopics),
//  2. produces --records records with distinct keys, values of varied sizes
//     (null, empty, small, medium, large; compressible and not), several headers
//     (including a duplicate key, an empty and a null value) and explicit
//     timestamps (some deliberately out of order), using the default idempotent
//     producer with acks=all,
//  3. reads everything back with a direct-assignment consumer (no group) and
//     checks key, value, headers, timestamp, timestamp type, per-partition order,
//     that offsets equal what the producer was told, and that the batches come
//     back with the codec they were written with (or uncompressed, which
//     franz-go sends when compression does not help),
//  4. checks ListOffsets: start, end and by timestamp (exact expected offsets),
//  5. DeleteRecords in the middle of partition 0 and to the high watermark (-1)
//     of partition 1, then checks the log start offsets and re-reads partition 0.
//
// Then, on the first topic, it exercises metadata, CreatePartitions (and
// produces to the new partition), Describe/IncrementalAlterConfigs, a few
// expected errors, and finally DeleteTopics for everything it created.
//
// Everything is bounded by context timeouts. It prints progress to stdout and
// ends with a single "PASS ..." line and exit 0, or prints "FAIL <step>: <what>"
// to stderr and exits 1 (2 for bad usage).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

const (
	numPartitions = 3
	replication   = 1
	// Records produced to the partition added by CreatePartitions.
	newPartitionRecords = 50

	createTimeout  = 30 * time.Second
	produceTimeout = 120 * time.Second
	consumeTimeout = 120 * time.Second
	adminTimeout   = 30 * time.Second
)

// codec is one compression codec under test: its kgo setting and the
// attribute value Kafka puts in the batch header for it.
type codec struct {
	name  string
	kgo   kgo.CompressionCodec
	attrs uint8 // RecordAttrs.CompressionType(): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
}

var codecs = []codec{
	{"none", kgo.NoCompression(), 0},
	{"gzip", kgo.GzipCompression(), 1},
	{"snappy", kgo.SnappyCompression(), 2},
	{"lz4", kgo.Lz4Compression(), 3},
	{"zstd", kgo.ZstdCompression(), 4},
}

// expRec is what we produced, plus where the broker said it landed.
type expRec struct {
	idx       int
	key       []byte
	value     []byte // nil means a null value, distinct from empty
	headers   []kgo.RecordHeader
	timestamp int64 // unix millis
	partition int32
	offset    int64
}

// topicRun holds one codec's topic and everything we expect to find in it.
type topicRun struct {
	codec codec
	topic string
	recs  []*expRec
	// byPart[p] is partition p's records sorted by offset.
	byPart map[int32][]*expRec
}

// failure is a check that failed; step says where.
type failure struct {
	step string
	msg  string
}

func (f *failure) Error() string { return f.step + ": " + f.msg }

func failf(step, format string, args ...any) error {
	return &failure{step: step, msg: fmt.Sprintf(format, args...)}
}

// checker carries the configuration and the clients shared by every step.
type checker struct {
	bootstrap []string
	prefix    string
	records   int
	logLevel  kgo.LogLevel

	adm     *kadm.Client
	admKgo  *kgo.Client
	created []string // topics to delete at the end (or on failure)
}

func main() {
	bootstrap := flag.String("bootstrap", "", "comma-separated host:port list of the broker(s) (required)")
	prefix := flag.String("topic-prefix", "clientcheck", "prefix for the topics this run creates")
	records := flag.Int("records", 3000, "records to produce per codec")
	timeout := flag.Duration("timeout", 5*time.Minute, "overall deadline for the whole run")
	logLevel := flag.String("log-level", "none", "franz-go log level on stderr: none, error, warn, info, debug")
	keep := flag.Bool("keep", false, "do not delete the created topics when a check fails (for debugging)")
	flag.Parse()

	if *bootstrap == "" || *records < 1 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: clientcheck --bootstrap host:port [--topic-prefix P] [--records N] [--timeout D] [--log-level L] [--keep]")
		os.Exit(2)
	}
	lvl, ok := map[string]kgo.LogLevel{
		"none": kgo.LogLevelNone, "error": kgo.LogLevelError, "warn": kgo.LogLevelWarn,
		"info": kgo.LogLevelInfo, "debug": kgo.LogLevelDebug,
	}[*logLevel]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown --log-level %q\n", *logLevel)
		os.Exit(2)
	}

	c := &checker{
		bootstrap: strings.Split(*bootstrap, ","),
		prefix:    *prefix,
		records:   *records,
		logLevel:  lvl,
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	start := time.Now()
	summary, err := c.run(ctx)
	cancel()
	if err != nil && !*keep {
		c.cleanup()
	}
	if c.admKgo != nil {
		c.admKgo.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("PASS franz-go %s against %s: %s in %.1fs\n",
		franzVersion(), *bootstrap, summary, time.Since(start).Seconds())
}

// franzVersion reports the franz-go module version compiled in.
func franzVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/twmb/franz-go" {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

// opts returns the options every client shares, plus extra.
func (c *checker) opts(extra ...kgo.Opt) []kgo.Opt {
	o := []kgo.Opt{
		kgo.SeedBrokers(c.bootstrap...),
		kgo.ClientID("runnel-clientcheck"),
		// Fail fast on a dead broker rather than retrying for a long time.
		kgo.RetryTimeout(20 * time.Second),
		kgo.DialTimeout(5 * time.Second),
	}
	if c.logLevel != kgo.LogLevelNone {
		o = append(o, kgo.WithLogger(kgo.BasicLogger(os.Stderr, c.logLevel, nil)))
	}
	return append(o, extra...)
}

func (c *checker) run(ctx context.Context) (string, error) {
	var err error
	c.admKgo, err = kgo.NewClient(c.opts()...)
	if err != nil {
		return "", failf("setup", "kgo.NewClient: %v", err)
	}
	c.adm = kadm.NewClient(c.admKgo)
	c.adm.SetTimeoutMillis(int32(adminTimeout / time.Millisecond))

	if err := c.printVersions(ctx); err != nil {
		return "", err
	}

	stamp := time.Now().UnixNano() % 1_000_000_000
	var runs []*topicRun
	for i, cd := range codecs {
		r := &topicRun{codec: cd, topic: fmt.Sprintf("%s-%d-%s", c.prefix, stamp, cd.name)}
		if err := c.createTopic(ctx, r.topic); err != nil {
			return "", err
		}
		if err := c.produce(ctx, r, uint64(i)); err != nil {
			return "", err
		}
		if err := c.consumeAndVerify(ctx, "["+cd.name+"] consume", r.topic, r.byPart, nil, &cd); err != nil {
			return "", err
		}
		if err := c.checkListOffsets(ctx, r); err != nil {
			return "", err
		}
		if err := c.checkDeleteRecords(ctx, r); err != nil {
			return "", err
		}
		runs = append(runs, r)
		// Keep only the first run's records (the admin checks use them).
		if i > 0 {
			r.recs, r.byPart = nil, nil
		}
	}

	first := runs[0]
	if err := c.checkMetadata(ctx, runs); err != nil {
		return "", err
	}
	if err := c.checkCreatePartitions(ctx, first); err != nil {
		return "", err
	}
	if err := c.checkConfigs(ctx, first.topic); err != nil {
		return "", err
	}
	if err := c.checkExpectedErrors(ctx, first.topic); err != nil {
		return "", err
	}
	if err := c.deleteTopics(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d codecs x %d records produced and verified, kadm offsets/delete-records/partitions/configs/delete-topics ok",
		len(codecs), c.records), nil
}

// printVersions asks the broker for its ApiVersions and prints, for each
// request this program makes, the version franz-go will use (the lower of
// the broker's max and franz-go's max).
func (c *checker) printVersions(ctx context.Context) error {
	const step = "api-versions"
	sctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(sctx, c.admKgo)
	if err != nil {
		return failf(step, "ApiVersions request: %v", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return failf(step, "ApiVersions error: %v", err)
	}
	broker := kversion.FromApiVersionsResponse(resp)
	client := kversion.Stable()
	keys := []int16{0, 1, 2, 3, 18, 19, 20, 21, 22, 32, 37, 44} // every request this program sends
	var parts, missing []string
	for _, k := range keys {
		bmax, ok := broker.LookupMaxKeyVersion(k)
		if !ok {
			missing = append(missing, kmsg.NameForKey(k))
			continue
		}
		cmax, _ := client.LookupMaxKeyVersion(k)
		parts = append(parts, fmt.Sprintf("%s=v%d", kmsg.NameForKey(k), min(bmax, cmax)))
	}
	fmt.Printf("api versions franz-go will use: %s\n", strings.Join(parts, " "))
	if len(missing) > 0 {
		return failf(step, "broker does not advertise %s", strings.Join(missing, ", "))
	}
	return nil
}

// createTopic creates a 3-partition RF-1 topic and waits until metadata shows
// every partition with a leader.
func (c *checker) createTopic(ctx context.Context, topic string) error {
	step := "create-topic " + topic
	sctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	// message.timestamp.type=CreateTime is Kafka's default; setting it makes
	// the "timestamps come back as produced" expectation explicit, and lets
	// checkConfigs see a config set at creation time.
	cfg := map[string]*string{"message.timestamp.type": kadm.StringPtr("CreateTime")}
	resp, err := c.adm.CreateTopic(sctx, numPartitions, replication, cfg, topic)
	if err != nil {
		return failf(step, "CreateTopics: %v (%s)", err, resp.ErrMessage)
	}
	c.created = append(c.created, topic)
	if resp.NumPartitions != numPartitions || resp.ReplicationFactor != replication {
		return failf(step, "CreateTopics response says %d partitions, RF %d; want %d, %d",
			resp.NumPartitions, resp.ReplicationFactor, numPartitions, replication)
	}
	return c.waitPartitions(sctx, step, topic, numPartitions)
}

// waitPartitions polls metadata until topic has n partitions, all with a
// leader and no error.
func (c *checker) waitPartitions(ctx context.Context, step, topic string, n int) error {
	var last string
	for {
		md, err := c.adm.Metadata(ctx, topic)
		if err == nil {
			td := md.Topics[topic]
			switch {
			case td.Err != nil:
				last = fmt.Sprintf("topic error %v", td.Err)
			case len(td.Partitions) != n:
				last = fmt.Sprintf("%d partitions", len(td.Partitions))
			default:
				ready := true
				for _, p := range td.Partitions {
					if p.Err != nil || p.Leader < 0 {
						ready = false
						last = fmt.Sprintf("partition %d: leader %d, err %v", p.Partition, p.Leader, p.Err)
					}
				}
				if ready {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return failf(step, "metadata never showed %d partitions with leaders (last: %s)", n, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// makeRecords builds n deterministic records for one codec.
func makeRecords(cd codec, n int, seed uint64) []*expRec {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	// Explicit timestamps: 20 minutes ago plus 10ms per record, so they are
	// in the past (Kafka rejects timestamps too far in the future) but well
	// inside any retention.ms (the Kafka peer uses one hour), and mostly
	// increasing. Every 17th record is 10 minutes older, out of order.
	base := time.Now().Add(-20 * time.Minute).UnixMilli()
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	recs := make([]*expRec, n)
	for i := range n {
		r := &expRec{idx: i, key: []byte(fmt.Sprintf("%s-key-%06d", cd.name, i))}

		switch {
		case i%11 == 0:
			r.value = nil // null value (tombstone-like)
		case i%11 == 1:
			r.value = []byte{} // empty, not null
		case i%500 == 250:
			r.value = payload(rng, 200_000) // large
		case i%5 == 0:
			r.value = payload(rng, 4096+rng.IntN(28_000))
		case i%3 == 0:
			r.value = payload(rng, 64+rng.IntN(4000))
		default:
			r.value = payload(rng, 1+rng.IntN(64))
		}

		if i%13 != 0 { // every 13th record has no headers at all
			r.headers = []kgo.RecordHeader{
				{Key: "idx", Value: []byte(strconv.Itoa(i))},
				{Key: "codec", Value: []byte(cd.name)},
				{Key: "dup", Value: []byte("first")}, // duplicate keys are legal and ordered
				{Key: "dup", Value: []byte("second")},
				{Key: "empty", Value: []byte{}},
			}
			if i%3 == 0 {
				r.headers = append(r.headers, kgo.RecordHeader{Key: "null", Value: nil})
			}
			if i%5 == 0 {
				r.headers = append(r.headers, kgo.RecordHeader{Key: "binary", Value: binary})
			}
		}

		r.timestamp = base + int64(i)*10
		if i%17 == 5 {
			r.timestamp = base - 600_000 + int64(i)
		}
		recs[i] = r
	}
	return recs
}

// payload returns size bytes: half the time compressible text, otherwise
// random bytes.
func payload(rng *rand.Rand, size int) []byte {
	b := make([]byte, size)
	if rng.IntN(2) == 0 {
		const text = "the quick brown fox jumps over the lazy runnel broker; "
		for i := range b {
			b[i] = text[i%len(text)]
		}
		return b
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// produce sends r's records with the run's codec and records each one's
// partition and offset from its promise. It checks that offsets in each
// partition are 0..n-1 in produce order (a fresh topic, one idempotent producer).
func (c *checker) produce(ctx context.Context, r *topicRun, seed uint64) error {
	step := "[" + r.codec.name + "] produce"
	r.recs = makeRecords(r.codec, c.records, seed)

	cl, err := kgo.NewClient(c.opts(
		kgo.DefaultProduceTopic(r.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // the default, stated explicitly
		kgo.ProducerBatchCompression(r.codec.kgo),
		// No kgo.RecordDeliveryTimeout: franz-go measures it from each
		// record's Timestamp, and ours are minutes old on purpose. The
		// context passed to Produce and Flush bounds the wait instead.
	)...)
	if err != nil {
		return failf(step, "kgo.NewClient: %v", err)
	}
	defer cl.Close()

	sctx, cancel := context.WithTimeout(ctx, produceTimeout)
	defer cancel()
	start := time.Now()
	errs := make([]error, len(r.recs))
	var wg sync.WaitGroup
	for i, e := range r.recs {
		rec := &kgo.Record{
			Key:       e.key,
			Value:     e.value,
			Headers:   e.headers,
			Timestamp: time.UnixMilli(e.timestamp),
		}
		wg.Add(1)
		cl.Produce(sctx, rec, func(got *kgo.Record, err error) {
			defer wg.Done()
			errs[i] = err
			e.partition, e.offset = got.Partition, got.Offset
		})
	}
	if err := cl.Flush(sctx); err != nil {
		// Some promises may never run; Close (deferred) fails what is left.
		return failf(step, "flush: %v (not every record was acknowledged within %v)", err, produceTimeout)
	}
	wg.Wait() // a successful Flush means every promise has been called
	elapsed := time.Since(start)
	for i, err := range errs {
		if err != nil {
			return failf(step, "record %d failed: %v", i, err)
		}
	}

	r.byPart = map[int32][]*expRec{}
	for _, e := range r.recs { // in produce order
		if e.partition < 0 || e.partition >= numPartitions {
			return failf(step, "record %d: promise gave partition %d", e.idx, e.partition)
		}
		want := int64(len(r.byPart[e.partition]))
		if e.offset != want {
			return failf(step, "record %d: partition %d offset %d, want %d (offsets must be contiguous from 0 in produce order)",
				e.idx, e.partition, e.offset, want)
		}
		r.byPart[e.partition] = append(r.byPart[e.partition], e)
	}
	if c.records >= 30 && len(r.byPart) != numPartitions {
		return failf(step, "records landed in only %d of %d partitions", len(r.byPart), numPartitions)
	}
	fmt.Printf("[%s] produced %d records to %s in %.2fs (%s)\n",
		r.codec.name, len(r.recs), r.topic, elapsed.Seconds(), partCounts(r.byPart))
	return nil
}

func partCounts(byPart map[int32][]*expRec) string {
	var ps []int32
	for p := range byPart {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("p%d=%d", p, len(byPart[p])))
	}
	return strings.Join(s, " ")
}

// consumeAndVerify reads the given partitions of topic from their start (with
// a direct assignment, no group) until every expected record has arrived,
// checking each one. want[p] lists partition p's expected records by offset;
// from[p], if set, is the index in want[p] of the first record expected (the
// log start after DeleteRecords). If cd is set, it also checks batch codecs.
func (c *checker) consumeAndVerify(ctx context.Context, step, topic string, want map[int32][]*expRec, from map[int32]int, cd *codec) error {
	assign := map[int32]kgo.Offset{}
	next := map[int32]int{}
	remaining := 0
	for p, recs := range want {
		next[p] = from[p]
		if n := len(recs) - from[p]; n > 0 {
			assign[p] = kgo.NewOffset().AtStart()
			remaining += n
		}
	}
	if remaining == 0 {
		return nil
	}

	cl, err := kgo.NewClient(c.opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}),
		kgo.FetchMaxWait(500*time.Millisecond),
	)...)
	if err != nil {
		return failf(step, "kgo.NewClient: %v", err)
	}
	defer cl.Close()

	sctx, cancel := context.WithTimeout(ctx, consumeTimeout)
	defer cancel()
	start := time.Now()
	total, compressed := remaining, 0
	for remaining > 0 {
		fetches := cl.PollFetches(sctx)
		if sctx.Err() != nil {
			return failf(step, "timed out with %d of %d records still missing (next expected: %s)",
				remaining, total, nextDesc(want, next))
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			fe := errs[0]
			return failf(step, "fetch error on %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		var verr error
		fetches.EachRecord(func(got *kgo.Record) {
			if verr != nil {
				return
			}
			p := got.Partition
			i := next[p]
			if i >= len(want[p]) {
				verr = failf(step, "partition %d: unexpected extra record at offset %d", p, got.Offset)
				return
			}
			exp := want[p][i]
			if err := compareRecord(exp, got); err != nil {
				verr = failf(step, "partition %d offset %d (record %d): %v", p, got.Offset, exp.idx, err)
				return
			}
			if cd != nil {
				switch ct := got.Attrs.CompressionType(); ct {
				case cd.attrs:
					if ct != 0 {
						compressed++
					}
				case 0: // franz-go sends a batch uncompressed if compressing did not shrink it
				default:
					verr = failf(step, "partition %d offset %d: batch codec %d, produced with %s (%d)",
						p, got.Offset, ct, cd.name, cd.attrs)
					return
				}
			}
			next[p] = i + 1
			remaining--
		})
		if verr != nil {
			return verr
		}
	}
	// With a handful of tiny records compression may not help, and franz-go
	// then sends the batch uncompressed; with more data it always helps.
	if cd != nil && cd.attrs != 0 && compressed == 0 && total >= 30 {
		return failf(step, "no record came back in a %s-compressed batch", cd.name)
	}
	fmt.Printf("%s: %d records verified in %.2fs", step, total, time.Since(start).Seconds())
	if cd != nil && cd.attrs != 0 {
		fmt.Printf(" (%d in %s batches)", compressed, cd.name)
	}
	fmt.Println()
	return nil
}

// nextDesc describes the next expected offset of each partition, for timeouts.
func nextDesc(want map[int32][]*expRec, next map[int32]int) string {
	var s []string
	for p, recs := range want {
		if next[p] < len(recs) {
			s = append(s, fmt.Sprintf("p%d@%d", p, recs[next[p]].offset))
		}
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// compareRecord checks a consumed record against what was produced.
func compareRecord(exp *expRec, got *kgo.Record) error {
	if got.Offset != exp.offset {
		return fmt.Errorf("offset %d, producer was told %d (order broken or record lost)", got.Offset, exp.offset)
	}
	if !bytes.Equal(got.Key, exp.key) {
		return fmt.Errorf("key %q, want %q", trunc(got.Key), trunc(exp.key))
	}
	if err := compareBytes("value", got.Value, exp.value); err != nil {
		return err
	}
	if ts := got.Timestamp.UnixMilli(); ts != exp.timestamp {
		return fmt.Errorf("timestamp %d, want %d", ts, exp.timestamp)
	}
	if tt := got.Attrs.TimestampType(); tt != 0 {
		return fmt.Errorf("timestamp type %d, want 0 (CreateTime)", tt)
	}
	if len(got.Headers) != len(exp.headers) {
		return fmt.Errorf("%d headers, want %d", len(got.Headers), len(exp.headers))
	}
	for j, h := range exp.headers {
		g := got.Headers[j]
		if g.Key != h.Key {
			return fmt.Errorf("header %d key %q, want %q", j, g.Key, h.Key)
		}
		if err := compareBytes("header "+h.Key, g.Value, h.Value); err != nil {
			return err
		}
	}
	return nil
}

// compareBytes compares two byte strings, telling null (nil) from empty.
func compareBytes(what string, got, want []byte) error {
	if (got == nil) != (want == nil) {
		return fmt.Errorf("%s is %s, want %s", what, nullness(got), nullness(want))
	}
	if !bytes.Equal(got, want) {
		at := 0
		for at < len(got) && at < len(want) && got[at] == want[at] {
			at++
		}
		return fmt.Errorf("%s differs: %d bytes, want %d, first difference at byte %d", what, len(got), len(want), at)
	}
	return nil
}

func nullness(b []byte) string {
	if b == nil {
		return "null"
	}
	return fmt.Sprintf("non-null (%d bytes)", len(b))
}

func trunc(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// checkListOffsets checks the start, end and by-timestamp offsets of a freshly
// produced topic against what we produced.
func (c *checker) checkListOffsets(ctx context.Context, r *topicRun) error {
	step := "[" + r.codec.name + "] list-offsets"
	sctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()

	starts, err := c.adm.ListStartOffsets(sctx, r.topic)
	if err := listedErr(starts, err); err != nil {
		return failf(step, "ListStartOffsets: %v", err)
	}
	ends, err := c.adm.ListEndOffsets(sctx, r.topic)
	if err := listedErr(ends, err); err != nil {
		return failf(step, "ListEndOffsets: %v", err)
	}
	for p := int32(0); p < numPartitions; p++ {
		if err := expectOffset(starts, r.topic, p, 0); err != nil {
			return failf(step, "start offset: %v", err)
		}
		if err := expectOffset(ends, r.topic, p, int64(len(r.byPart[p]))); err != nil {
			return failf(step, "end offset: %v", err)
		}
	}

	// By timestamp: Kafka answers the first offset (in log order) whose
	// timestamp is >= the target, or the end offset if there is none (kadm
	// turns the broker's -1 into a second, "latest", lookup). Targets: before
	// everything, the middle record's time (so the out-of-order records must
	// be skipped), the last record's time, and the future.
	mid := r.recs[len(r.recs)/2].timestamp
	last := r.recs[len(r.recs)-1].timestamp
	for _, target := range []int64{0, mid, mid + 1, last, time.Now().Add(time.Hour).UnixMilli()} {
		got, err := c.adm.ListOffsetsAfterMilli(sctx, target, r.topic)
		if err := listedErr(got, err); err != nil {
			return failf(step, "ListOffsetsAfterMilli(%d): %v", target, err)
		}
		for p := int32(0); p < numPartitions; p++ {
			recs := r.byPart[p]
			wantOff, wantTS := int64(len(recs)), int64(-1)
			for _, e := range recs {
				if e.timestamp >= target {
					wantOff, wantTS = e.offset, e.timestamp
					break
				}
			}
			lo, _ := got.Lookup(r.topic, p)
			if lo.Offset != wantOff {
				return failf(step, "ListOffsetsAfterMilli(%d) partition %d: offset %d, want %d", target, p, lo.Offset, wantOff)
			}
			if wantTS >= 0 && lo.Timestamp != wantTS {
				return failf(step, "ListOffsetsAfterMilli(%d) partition %d: timestamp %d, want %d (of offset %d)",
					target, p, lo.Timestamp, wantTS, wantOff)
			}
		}
	}
	fmt.Printf("%s: start/end/by-timestamp offsets ok\n", step)
	return nil
}

// listedErr folds a kadm list call's request error and per-partition errors.
func listedErr(l kadm.ListedOffsets, err error) error {
	if err != nil {
		return err
	}
	return l.Error()
}

func expectOffset(l kadm.ListedOffsets, topic string, p int32, want int64) error {
	lo, ok := l.Lookup(topic, p)
	if !ok {
		return fmt.Errorf("partition %d missing from the response", p)
	}
	if lo.Offset != want {
		return fmt.Errorf("partition %d: %d, want %d", p, lo.Offset, want)
	}
	return nil
}

// checkDeleteRecords deletes the first half of partition 0 (usually in the
// middle of a batch) and all of partition 1 (offset -1 means "up to the high
// watermark"), checks the low watermarks and the listed start offsets, and
// re-reads partition 0 from its new start.
func (c *checker) checkDeleteRecords(ctx context.Context, r *topicRun) error {
	step := "[" + r.codec.name + "] delete-records"
	sctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()

	n0, n1, n2 := int64(len(r.byPart[0])), int64(len(r.byPart[1])), int64(len(r.byPart[2]))
	cut0 := n0 / 2
	var dels kadm.Offsets
	dels.AddOffset(r.topic, 0, cut0, -1)
	dels.AddOffset(r.topic, 1, -1, -1)
	resp, err := c.adm.DeleteRecords(sctx, dels)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return failf(step, "DeleteRecords: %v", err)
	}
	for p, want := range map[int32]int64{0: cut0, 1: n1} {
		dr, err := resp.On(r.topic, p, nil)
		if err != nil {
			return failf(step, "partition %d missing from the response", p)
		}
		if dr.LowWatermark != want {
			return failf(step, "partition %d: low watermark %d, want %d", p, dr.LowWatermark, want)
		}
	}

	starts, err := c.adm.ListStartOffsets(sctx, r.topic)
	if err := listedErr(starts, err); err != nil {
		return failf(step, "ListStartOffsets: %v", err)
	}
	ends, err := c.adm.ListEndOffsets(sctx, r.topic)
	if err := listedErr(ends, err); err != nil {
		return failf(step, "ListEndOffsets: %v", err)
	}
	for p, want := range map[int32][2]int64{0: {cut0, n0}, 1: {n1, n1}, 2: {0, n2}} {
		if err := expectOffset(starts, r.topic, p, want[0]); err != nil {
			return failf(step, "start offset after delete: %v", err)
		}
		if err := expectOffset(ends, r.topic, p, want[1]); err != nil {
			return failf(step, "end offset after delete: %v", err)
		}
	}

	// Reading partition 0 "from the start" must now begin exactly at cut0.
	want := map[int32][]*expRec{0: r.byPart[0]}
	if err := c.consumeAndVerify(ctx, step+" re-read p0", r.topic, want, map[int32]int{0: int(cut0)}, nil); err != nil {
		return err
	}
	return nil
}

// checkMetadata checks ListTopics (all topics) and per-topic metadata.
func (c *checker) checkMetadata(ctx context.Context, runs []*topicRun) error {
	const step = "metadata"
	sctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()

	md, err := c.adm.Metadata(sctx)
	if err != nil {
		return failf(step, "Metadata (all topics): %v", err)
	}
	if len(md.Brokers) == 0 {
		return failf(step, "no brokers in metadata")
	}
	brokers := map[int32]bool{}
	for _, b := range md.Brokers {
		brokers[b.NodeID] = true
	}

	all, err := c.adm.ListTopics(sctx)
	if err != nil {
		return failf(step, "ListTopics: %v", err)
	}
	for _, r := range runs {
		td, ok := all[r.topic]
		if !ok {
			return failf(step, "ListTopics does not list %s (it lists %d topics)", r.topic, len(all))
		}
		if td.Err != nil {
			return failf(step, "%s: %v", r.topic, td.Err)
		}
		if td.IsInternal {
			return failf(step, "%s is marked internal", r.topic)
		}
		if len(td.Partitions) != numPartitions || td.Partitions.NumReplicas() != replication {
			return failf(step, "%s: %d partitions with %d replicas, want %d with %d",
				r.topic, len(td.Partitions), td.Partitions.NumReplicas(), numPartitions, replication)
		}
		for _, p := range td.Partitions.Sorted() {
			if p.Err != nil || !brokers[p.Leader] || !slices.Contains(p.Replicas, p.Leader) || !slices.Contains(p.ISR, p.Leader) {
				return failf(step, "%s/%d: leader %d, replicas %v, isr %v, err %v (brokers %v)",
					r.topic, p.Partition, p.Leader, p.Replicas, p.ISR, p.Err, md.Brokers.NodeIDs())
			}
		}
	}
	fmt.Printf("%s: %d brokers, cluster %q, all %d topics listed with %d partitions\n",
		step, len(md.Brokers), md.Cluster, len(runs), numPartitions)
	return nil
}

// checkCreatePartitions adds a partition to r's topic, waits for it, produces
// to it with a manual partitioner, and reads it back.
func (c *checker) checkCreatePartitions(ctx context.Context, r *topicRun) error {
	const step = "create-partitions"
	sctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()

	resp, err := c.adm.CreatePartitions(sctx, 1, r.topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return failf(step, "CreatePartitions(+1): %v (%s)", err, resp[r.topic].ErrMessage)
	}
	if err := c.waitPartitions(sctx, step, r.topic, numPartitions+1); err != nil {
		return err
	}

	const newP = int32(numPartitions)
	cl, err := kgo.NewClient(c.opts(
		kgo.DefaultProduceTopic(r.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)...)
	if err != nil {
		return failf(step, "kgo.NewClient: %v", err)
	}
	defer cl.Close()

	now := time.Now().UnixMilli()
	var want []*expRec
	for i := range newPartitionRecords {
		e := &expRec{
			idx:       i,
			key:       []byte(fmt.Sprintf("new-partition-%03d", i)),
			value:     []byte(strings.Repeat("x", i)),
			headers:   []kgo.RecordHeader{{Key: "idx", Value: []byte(strconv.Itoa(i))}},
			timestamp: now - int64(newPartitionRecords-i),
		}
		res := cl.ProduceSync(sctx, &kgo.Record{
			Key: e.key, Value: e.value, Headers: e.headers,
			Timestamp: time.UnixMilli(e.timestamp), Partition: newP,
		})
		got, err := res.First()
		if err != nil {
			return failf(step, "produce to new partition %d, record %d: %v", newP, i, err)
		}
		if got.Partition != newP || got.Offset != int64(i) {
			return failf(step, "record %d landed at %d/%d, want %d/%d", i, got.Partition, got.Offset, newP, i)
		}
		e.partition, e.offset = got.Partition, got.Offset
		want = append(want, e)
	}

	ends, err := c.adm.ListEndOffsets(sctx, r.topic)
	if err := listedErr(ends, err); err != nil {
		return failf(step, "ListEndOffsets: %v", err)
	}
	for p := int32(0); p < numPartitions; p++ {
		if err := expectOffset(ends, r.topic, p, int64(len(r.byPart[p]))); err != nil {
			return failf(step, "old partition end offset changed: %v", err)
		}
	}
	if err := expectOffset(ends, r.topic, newP, newPartitionRecords); err != nil {
		return failf(step, "new partition end offset: %v", err)
	}
	if err := c.consumeAndVerify(ctx, step+" read new partition", r.topic, map[int32][]*expRec{newP: want}, nil, nil); err != nil {
		return err
	}
	return nil
}

// checkConfigs describes the topic's configs, alters two incrementally, then
// deletes one and checks the other is untouched.
func (c *checker) checkConfigs(ctx context.Context, topic string) error {
	const step = "configs"
	sctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()

	describe := func(what string) (map[string]kadm.Config, error) {
		rcs, err := c.adm.DescribeTopicConfigs(sctx, topic)
		if err != nil {
			return nil, failf(step, "DescribeTopicConfigs (%s): %v", what, err)
		}
		rc, err := rcs.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			return nil, failf(step, "DescribeTopicConfigs (%s): %v %s", what, err, rc.ErrMessage)
		}
		m := map[string]kadm.Config{}
		for _, cfg := range rc.Configs {
			m[cfg.Key] = cfg
		}
		return m, nil
	}
	expect := func(m map[string]kadm.Config, what, key, value string, dynamic bool) error {
		cfg, ok := m[key]
		if !ok {
			return failf(step, "%s: %s missing from DescribeConfigs", what, key)
		}
		isDyn := cfg.Source == kmsg.ConfigSourceDynamicTopicConfig
		if value != "" && cfg.MaybeValue() != value {
			return failf(step, "%s: %s = %q, want %q", what, key, cfg.MaybeValue(), value)
		}
		if isDyn != dynamic {
			return failf(step, "%s: %s = %q has source %v, want dynamic-topic-config=%v",
				what, key, cfg.MaybeValue(), cfg.Source, dynamic)
		}
		return nil
	}
	alter := func(what string, ops ...kadm.AlterConfig) error {
		resp, err := c.adm.AlterTopicConfigs(sctx, ops, topic)
		if err != nil {
			return failf(step, "IncrementalAlterConfigs (%s): %v", what, err)
		}
		ar, err := resp.On(topic, nil)
		if err == nil {
			err = ar.Err
		}
		if err != nil {
			return failf(step, "IncrementalAlterConfigs (%s): %v %s", what, err, ar.ErrMessage)
		}
		return nil
	}

	m, err := describe("initial")
	if err != nil {
		return err
	}
	if err := expect(m, "initial", "message.timestamp.type", "CreateTime", true); err != nil {
		return err
	}
	if err := expect(m, "initial", "retention.ms", "", false); err != nil {
		return err
	}
	if err := expect(m, "initial", "cleanup.policy", "delete", false); err != nil {
		return err
	}

	if err := alter("set retention.ms and max.message.bytes",
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("4321000")},
		kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("2000000")},
	); err != nil {
		return err
	}
	if m, err = describe("after set"); err != nil {
		return err
	}
	for k, v := range map[string]string{"retention.ms": "4321000", "max.message.bytes": "2000000", "message.timestamp.type": "CreateTime"} {
		if err := expect(m, "after set", k, v, true); err != nil {
			return err
		}
	}

	if err := alter("delete retention.ms",
		kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"},
	); err != nil {
		return err
	}
	if m, err = describe("after delete"); err != nil {
		return err
	}
	if err := expect(m, "after delete", "retention.ms", "", false); err != nil {
		return err
	}
	retention := m["retention.ms"]
	if retention.MaybeValue() == "4321000" {
		return failf(step, "after delete: retention.ms still 4321000")
	}
	// Incremental: the other configs are left as they were.
	for k, v := range map[string]string{"max.message.bytes": "2000000", "message.timestamp.type": "CreateTime"} {
		if err := expect(m, "after delete", k, v, true); err != nil {
			return err
		}
	}
	fmt.Printf("%s: describe, incremental set and delete ok (default retention.ms=%s)\n", step, retention.MaybeValue())
	return nil
}

// checkExpectedErrors checks a few requests Kafka refuses, with its error codes.
func (c *checker) checkExpectedErrors(ctx context.Context, topic string) error {
	const step = "expected-errors"
	sctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()

	// Creating an existing topic: TOPIC_ALREADY_EXISTS (36).
	if _, err := c.adm.CreateTopic(sctx, 1, replication, nil, topic); !errors.Is(err, kerr.TopicAlreadyExists) {
		return failf(step, "CreateTopics of an existing topic: got %v, want %v", err, kerr.TopicAlreadyExists)
	}

	// Shrinking partitions: INVALID_PARTITIONS (37).
	resp, err := c.adm.UpdatePartitions(sctx, 1, topic)
	if err == nil {
		err = resp.Error()
	}
	if !errors.Is(err, kerr.InvalidPartitions) {
		return failf(step, "CreatePartitions to fewer partitions: got %v, want %v", err, kerr.InvalidPartitions)
	}

	// A non-numeric retention.ms: INVALID_CONFIG (40).
	aresp, err := c.adm.AlterTopicConfigs(sctx,
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("not-a-number")}}, topic)
	if err == nil {
		var ar kadm.AlterConfigsResponse
		ar, err = aresp.On(topic, nil)
		if err == nil {
			err = ar.Err
		}
	}
	if !errors.Is(err, kerr.InvalidConfig) {
		return failf(step, "IncrementalAlterConfigs retention.ms=not-a-number: got %v, want %v", err, kerr.InvalidConfig)
	}

	// Metadata for a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION (3),
	// and no auto-creation (kadm asks with allow_auto_topic_creation=false).
	missing := topic + "-does-not-exist"
	md, err := c.adm.Metadata(sctx, missing)
	if err != nil {
		return failf(step, "Metadata of a missing topic: %v", err)
	}
	if td := md.Topics[missing]; !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return failf(step, "Metadata of a missing topic: topic error %v, want %v", td.Err, kerr.UnknownTopicOrPartition)
	}
	fmt.Printf("%s: TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION ok\n", step)
	return nil
}

// deleteTopics deletes every topic this run created and waits until metadata
// no longer lists them.
func (c *checker) deleteTopics(ctx context.Context) error {
	const step = "delete-topics"
	sctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()

	resp, err := c.adm.DeleteTopics(sctx, c.created...)
	if err != nil {
		return failf(step, "DeleteTopics: %v", err)
	}
	for _, t := range c.created {
		r, ok := resp[t]
		if !ok {
			return failf(step, "%s missing from the DeleteTopics response", t)
		}
		if r.Err != nil {
			return failf(step, "%s: %v %s", t, r.Err, r.ErrMessage)
		}
	}
	deleted := c.created
	c.created = nil
	for {
		md, err := c.adm.Metadata(sctx, deleted...)
		var left []string
		if err == nil {
			for _, t := range deleted {
				if td := md.Topics[t]; !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
					left = append(left, t)
				}
			}
			if len(left) == 0 {
				break
			}
		}
		select {
		case <-sctx.Done():
			return failf(step, "topics still in metadata after deletion: %v (last error %v)", left, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Printf("%s: %d topics deleted\n", step, len(deleted))
	return nil
}

// cleanup deletes whatever topics are left after a failure, best effort.
func (c *checker) cleanup() {
	if c.adm == nil || len(c.created) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := c.adm.DeleteTopics(ctx, c.created...); err != nil {
		fmt.Fprintf(os.Stderr, "cleanup: DeleteTopics: %v\n", err)
	}
}

// Command saramacheck drives a Kafka-compatible broker with Sarama
// (github.com/IBM/sarama), the other widely used Go Kafka client, and checks
// that every answer is what Apache Kafka would give.
//
// All clients use protocol version 4.0 (sarama.V4_0_0_0), acks=all and the
// idempotent producer (one in-flight request). The run:
//
//  1. creates a topic with 3 partitions and RF 1 (ClusterAdmin.CreateTopic)
//     and waits until ListTopics and DescribeTopics both show it with 3
//     partitions, each with a leader,
//  2. for each compression codec (none, gzip, snappy, lz4, zstd) produces
//     --records records with distinct keys, values of varied sizes and one
//     header each through a SyncProducer (SendMessages in batches) and checks
//     that every message got a partition and an offset, that offsets rise in
//     send order within a partition and that no offset is handed out twice,
//  3. consumes the topic in a consumer group (NewConsumerGroup, range
//     assignor, Offsets.Initial = OffsetOldest, auto commit off) until every
//     record is seen, checking that each partition delivers exactly the
//     produced records in offset order (offset, key, value and header, once
//     each), marking every message and committing with session.Commit(),
//  4. after the group is closed, checks with ClusterAdmin.
//     ListConsumerGroupOffsets that the committed offsets equal the partition
//     end offsets (Client.GetOffset(..., OffsetNewest)), which in turn must
//     equal the number of records produced to each partition,
//  5. deletes the topic (ClusterAdmin.DeleteTopic) and waits until ListTopics
//     no longer shows it.
//
// The whole run is bounded by --timeout: a watchdog prints a FAIL line and
// exits 1 if it is exceeded. It prints progress to stdout and ends with a
// single "PASS saramacheck: ..." line and exit 0, or prints
// "FAIL <step>: <what>" to stderr and exits 1 (2 for bad usage).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

const (
	numPartitions = 3
	replication   = 1
	batchSize     = 50 // messages per SendMessages call

	createTimeout  = 30 * time.Second
	consumeTimeout = 120 * time.Second
	deleteTimeout  = 30 * time.Second
)

type codec struct {
	name string
	c    sarama.CompressionCodec
}

var codecs = []codec{
	{"none", sarama.CompressionNone},
	{"gzip", sarama.CompressionGZIP},
	{"snappy", sarama.CompressionSnappy},
	{"lz4", sarama.CompressionLZ4},
	{"zstd", sarama.CompressionZSTD},
}

// expRec is what we produced, plus where the broker said it landed.
type expRec struct {
	key, value           []byte
	headerKey, headerVal []byte
	partition            int32
	offset               int64
}

type failure struct{ step, msg string }

func (f *failure) Error() string { return f.step + ": " + f.msg }

func failf(step, format string, args ...any) error {
	return &failure{step: step, msg: fmt.Sprintf(format, args...)}
}

type checker struct {
	bootstrap []string
	prefix    string
	records   int
	topic     string
	group     string

	admin   sarama.ClusterAdmin
	client  sarama.Client
	created bool

	recs   []*expRec
	byPart map[int32][]*expRec // sorted by offset

	step atomic.Value // string: the step in progress, for the watchdog
}

func main() {
	bootstrap := flag.String("bootstrap", "", "comma-separated host:port list of the broker(s) (required)")
	prefix := flag.String("topic-prefix", "saramacheck", "prefix for the topic and group this run creates")
	records := flag.Int("records", 300, "records to produce per codec")
	timeout := flag.Duration("timeout", 4*time.Minute, "overall deadline for the whole run")
	verbose := flag.Bool("verbose", false, "log Sarama's internals (protocol errors, retries) to stderr")
	flag.Parse()
	if *bootstrap == "" || *records < 1 || *timeout <= 0 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: saramacheck --bootstrap host:port [--topic-prefix P] [--records N] [--timeout D] [--verbose]")
		os.Exit(2)
	}
	if *verbose {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	}

	c := &checker{
		bootstrap: strings.Split(*bootstrap, ","),
		prefix:    *prefix,
		records:   *records,
		topic:     *prefix + "-t",
		group:     *prefix + "-g",
	}
	c.setStep("start")
	start := time.Now()
	// Sarama calls are not all cancellable: the watchdog bounds the run whatever blocks.
	time.AfterFunc(*timeout, func() {
		fmt.Fprintf(os.Stderr, "FAIL timeout: run exceeded --timeout %v during step %q\n", *timeout, c.step.Load())
		os.Exit(1)
	})
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	summary, err := c.run(ctx)
	cancel()
	if err != nil {
		c.cleanup()
	}
	if c.admin != nil {
		_ = c.admin.Close()
	}
	if c.client != nil {
		_ = c.client.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("PASS saramacheck: sarama %s against %s: %s in %.1fs\n",
		saramaVersion(), *bootstrap, summary, time.Since(start).Seconds())
}

func saramaVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/IBM/sarama" {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

func (c *checker) setStep(s string) { c.step.Store(s) }

// config is the configuration every client shares.
func (c *checker) config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "runnel-saramacheck"
	cfg.Version = sarama.V4_0_0_0
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Net.MaxOpenRequests = 1
	cfg.Metadata.AllowAutoTopicCreation = false
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Retry.Max = 20
	cfg.Producer.Retry.Backoff = 200 * time.Millisecond
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	return cfg
}

func (c *checker) run(ctx context.Context) (string, error) {
	var err error
	c.setStep("connect")
	if c.admin, err = sarama.NewClusterAdmin(c.bootstrap, c.config()); err != nil {
		return "", failf("connect", "NewClusterAdmin: %v", err)
	}
	if c.client, err = sarama.NewClient(c.bootstrap, c.config()); err != nil {
		return "", failf("connect", "NewClient: %v", err)
	}
	if err = c.createTopic(ctx); err != nil {
		return "", err
	}
	for _, cd := range codecs {
		if err = c.produce(cd); err != nil {
			return "", err
		}
	}
	if err = c.checkProduced(); err != nil {
		return "", err
	}
	if err = c.consume(ctx); err != nil {
		return "", err
	}
	ends, err := c.checkCommitted()
	if err != nil {
		return "", err
	}
	if err = c.deleteTopic(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("topic %s (%d partitions) created, listed and described; %d records (%d x %d codecs: none gzip snappy lz4 zstd) produced idempotently with acks=all and consumed once each in order by group %s; committed offsets %v = end offsets; topic deleted",
		c.topic, numPartitions, len(c.recs), c.records, len(codecs), c.group, ends), nil
}

// createTopic creates the topic and waits until ListTopics and DescribeTopics agree it
// has numPartitions partitions, each with a leader.
func (c *checker) createTopic(ctx context.Context) error {
	const step = "create-topic"
	c.setStep(step)
	detail := &sarama.TopicDetail{NumPartitions: numPartitions, ReplicationFactor: replication}
	if err := c.admin.CreateTopic(c.topic, detail, false); err != nil {
		return failf(step, "CreateTopic %s: %v", c.topic, err)
	}
	c.created = true
	var last string
	err := poll(ctx, createTimeout, func() bool {
		topics, err := c.admin.ListTopics()
		if err != nil {
			last = fmt.Sprintf("ListTopics: %v", err)
			return false
		}
		d, ok := topics[c.topic]
		if !ok {
			last = fmt.Sprintf("ListTopics does not list %s (%d topics listed)", c.topic, len(topics))
			return false
		}
		if d.NumPartitions != numPartitions || d.ReplicationFactor != replication {
			last = fmt.Sprintf("ListTopics shows %s with %d partitions, RF %d; want %d, %d",
				c.topic, d.NumPartitions, d.ReplicationFactor, numPartitions, replication)
			return false
		}
		md, err := c.admin.DescribeTopics([]string{c.topic})
		if err != nil {
			last = fmt.Sprintf("DescribeTopics: %v", err)
			return false
		}
		if len(md) != 1 || md[0].Name != c.topic {
			last = fmt.Sprintf("DescribeTopics returned %d topics (%s), want just %s", len(md), topicNames(md), c.topic)
			return false
		}
		if !errors.Is(md[0].Err, sarama.ErrNoError) {
			last = fmt.Sprintf("DescribeTopics: topic error %v", md[0].Err)
			return false
		}
		if len(md[0].Partitions) != numPartitions {
			last = fmt.Sprintf("DescribeTopics shows %d partitions, want %d", len(md[0].Partitions), numPartitions)
			return false
		}
		seen := map[int32]bool{}
		for _, p := range md[0].Partitions {
			if !errors.Is(p.Err, sarama.ErrNoError) || p.Leader < 0 || p.ID < 0 || p.ID >= numPartitions || seen[p.ID] {
				last = fmt.Sprintf("DescribeTopics partition %d: error %v, leader %d (ids seen %v)", p.ID, p.Err, p.Leader, seen)
				return false
			}
			if len(p.Replicas) != replication {
				last = fmt.Sprintf("DescribeTopics partition %d has replicas %v, want %d", p.ID, p.Replicas, replication)
				return false
			}
			seen[p.ID] = true
		}
		return true
	})
	if err != nil {
		return failf(step, "%v; last: %s", err, last)
	}
	fmt.Printf("created %s: listed and described with %d partitions\n", c.topic, numPartitions)
	return nil
}

func topicNames(md []*sarama.TopicMetadata) string {
	var n []string
	for _, t := range md {
		n = append(n, t.Name)
	}
	return strings.Join(n, ",")
}

// produce sends c.records records compressed with cd through a SyncProducer.
func (c *checker) produce(cd codec) error {
	step := "produce-" + cd.name
	c.setStep(step)
	cfg := c.config()
	cfg.Producer.Compression = cd.c
	p, err := sarama.NewSyncProducer(c.bootstrap, cfg)
	if err != nil {
		return failf(step, "NewSyncProducer: %v", err)
	}
	defer p.Close()

	start := time.Now()
	for from := 0; from < c.records; from += batchSize {
		to := min(from+batchSize, c.records)
		var msgs []*sarama.ProducerMessage
		var exps []*expRec
		for i := from; i < to; i++ {
			e := &expRec{
				key:       fmt.Appendf(nil, "key-%s-%05d", cd.name, i),
				value:     makeValue(cd.name, i),
				headerKey: []byte("h-" + cd.name),
				headerVal: fmt.Appendf(nil, "hv-%s-%d", cd.name, i),
			}
			exps = append(exps, e)
			msgs = append(msgs, &sarama.ProducerMessage{
				Topic:   c.topic,
				Key:     sarama.ByteEncoder(e.key),
				Value:   sarama.ByteEncoder(e.value),
				Headers: []sarama.RecordHeader{{Key: e.headerKey, Value: e.headerVal}},
			})
		}
		if err := p.SendMessages(msgs); err != nil {
			var perrs sarama.ProducerErrors
			if errors.As(err, &perrs) && len(perrs) > 0 {
				return failf(step, "SendMessages(records %d..%d): %d failed, first: %v", from, to-1, len(perrs), perrs[0].Err)
			}
			return failf(step, "SendMessages(records %d..%d): %v", from, to-1, err)
		}
		for i, m := range msgs {
			if m.Partition < 0 || m.Partition >= numPartitions || m.Offset < 0 {
				return failf(step, "record %d: got partition %d offset %d after a successful send", from+i, m.Partition, m.Offset)
			}
			exps[i].partition, exps[i].offset = m.Partition, m.Offset
		}
		c.recs = append(c.recs, exps...)
	}
	fmt.Printf("produced %d records with %s in %.2fs\n", c.records, cd.name, time.Since(start).Seconds())
	return nil
}

// makeValue gives values of varied sizes, some compressible, some not.
func makeValue(codec string, i int) []byte {
	base := fmt.Sprintf("value-%s-%05d", codec, i)
	switch i % 4 {
	case 0:
		return []byte(base)
	case 1:
		return []byte(base + strings.Repeat("-abc", 200)) // compressible
	case 2:
		b := []byte(base + ":")
		x := uint32(i*2654435761 + 1)
		for j := 0; j < 1500; j++ { // pseudo-random, barely compressible
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			b = append(b, byte(x))
		}
		return b
	default:
		return []byte(base + strings.Repeat("z", 5000))
	}
}

// checkProduced checks the offsets the producer was given: within a partition they rise
// in send order and, together, are exactly 0..n-1 (no gap, no duplicate).
func (c *checker) checkProduced() error {
	const step = "produce-offsets"
	c.setStep(step)
	c.byPart = map[int32][]*expRec{}
	for _, e := range c.recs {
		prev := c.byPart[e.partition]
		if len(prev) > 0 && prev[len(prev)-1].offset >= e.offset {
			return failf(step, "partition %d: %s got offset %d after %s got %d (want increasing in send order)",
				e.partition, e.key, e.offset, prev[len(prev)-1].key, prev[len(prev)-1].offset)
		}
		c.byPart[e.partition] = append(prev, e)
	}
	for p := int32(0); p < numPartitions; p++ {
		for i, e := range c.byPart[p] {
			if e.offset != int64(i) {
				return failf(step, "partition %d: record #%d (%s) has offset %d, want %d (offsets must be 0..n-1)", p, i, e.key, e.offset, i)
			}
		}
	}
	fmt.Printf("offsets per partition: %v\n", c.counts())
	return nil
}

func (c *checker) counts() []int {
	n := make([]int, numPartitions)
	for p := range n {
		n[p] = len(c.byPart[int32(p)])
	}
	return n
}

// groupHandler checks every consumed message against c.byPart, marks it, and commits
// and stops the run once everything has been seen.
type groupHandler struct {
	c      *checker
	cancel context.CancelFunc

	mu     sync.Mutex
	next   map[int32]int // index in byPart of the next expected record
	seen   int
	err    error
	claims map[string][]int32
	setups int
}

func (h *groupHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setups++
	h.claims = s.Claims()
	return nil
}

func (h *groupHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	s.Commit()
	return nil
}

func (h *groupHandler) fail(err error) {
	if h.err == nil {
		h.err = err
	}
	h.cancel()
}

func (h *groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	const step = "consume"
	for {
		select {
		case <-s.Context().Done():
			return nil
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.mu.Lock()
			err := h.check(m)
			if err != nil {
				h.fail(failf(step, "%v", err))
				h.mu.Unlock()
				return nil
			}
			s.MarkMessage(m, "")
			h.seen++
			if h.seen == len(h.c.recs) {
				s.Commit()
				h.cancel()
			}
			h.mu.Unlock()
		}
	}
}

// check compares one consumed message with the next record expected on its partition.
func (h *groupHandler) check(m *sarama.ConsumerMessage) error {
	if m.Topic != h.c.topic {
		return fmt.Errorf("message from unexpected topic %q", m.Topic)
	}
	exp := h.c.byPart[m.Partition]
	i := h.next[m.Partition]
	if i >= len(exp) {
		return fmt.Errorf("partition %d: unexpected message at offset %d after all %d records were seen (key %q)", m.Partition, m.Offset, len(exp), m.Key)
	}
	e := exp[i]
	switch {
	case m.Offset < e.offset:
		return fmt.Errorf("partition %d: offset %d delivered again (key %q); expected offset %d next", m.Partition, m.Offset, m.Key, e.offset)
	case m.Offset > e.offset:
		return fmt.Errorf("partition %d: got offset %d, want %d (%s) next: records skipped", m.Partition, m.Offset, e.offset, e.key)
	case !bytes.Equal(m.Key, e.key):
		return fmt.Errorf("partition %d offset %d: key %q, want %q", m.Partition, m.Offset, m.Key, e.key)
	case !bytes.Equal(m.Value, e.value):
		return fmt.Errorf("partition %d offset %d (%s): value of %d bytes differs from the %d bytes produced", m.Partition, m.Offset, e.key, len(m.Value), len(e.value))
	case len(m.Headers) != 1:
		return fmt.Errorf("partition %d offset %d (%s): %d headers, want 1", m.Partition, m.Offset, e.key, len(m.Headers))
	case !bytes.Equal(m.Headers[0].Key, e.headerKey) || !bytes.Equal(m.Headers[0].Value, e.headerVal):
		return fmt.Errorf("partition %d offset %d (%s): header %q=%q, want %q=%q", m.Partition, m.Offset, e.key,
			m.Headers[0].Key, m.Headers[0].Value, e.headerKey, e.headerVal)
	}
	h.next[m.Partition] = i + 1
	return nil
}

// consume reads everything back in a consumer group and commits the marked offsets.
func (c *checker) consume(ctx context.Context) error {
	const step = "consume"
	c.setStep(step)
	group, err := sarama.NewConsumerGroup(c.bootstrap, c.group, c.config())
	if err != nil {
		return failf(step, "NewConsumerGroup %s: %v", c.group, err)
	}
	cctx, cancel := context.WithTimeout(ctx, consumeTimeout)
	defer cancel()
	h := &groupHandler{c: c, cancel: cancel, next: map[int32]int{}}

	var groupErrs []error
	var errsDone sync.WaitGroup
	errsDone.Add(1)
	go func() {
		defer errsDone.Done()
		for e := range group.Errors() {
			groupErrs = append(groupErrs, e)
			cancel()
		}
	}()

	start := time.Now()
	var consumeErr error
	for cctx.Err() == nil {
		if err := group.Consume(cctx, []string{c.topic}, h); err != nil {
			if !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				consumeErr = err
			}
			break
		}
	}
	c.setStep("close-group")
	closeErr := group.Close()
	errsDone.Wait() // Errors() is closed by Close

	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.err != nil:
		return h.err
	case len(groupErrs) > 0:
		return failf(step, "consumer group reported %d error(s), first: %v", len(groupErrs), groupErrs[0])
	case consumeErr != nil:
		return failf(step, "Consume: %v", consumeErr)
	case h.seen != len(c.recs):
		return failf(step, "saw %d of %d records before giving up (%v); per partition %v of %v; sessions %d, last claims %v",
			h.seen, len(c.recs), context.Cause(cctx), h.next, c.counts(), h.setups, h.claims)
	case closeErr != nil:
		return failf("close-group", "Close: %v", closeErr)
	}
	if got := h.claims[c.topic]; len(got) != numPartitions {
		return failf(step, "the only member was assigned %v, want all %d partitions", h.claims, numPartitions)
	}
	fmt.Printf("consumed %d records in group %s (%d session(s)) in %.2fs\n", h.seen, c.group, h.setups, time.Since(start).Seconds())
	return nil
}

// checkCommitted checks that the group's committed offsets equal the end offsets.
func (c *checker) checkCommitted() ([]int64, error) {
	const step = "committed-offsets"
	c.setStep(step)
	parts := make([]int32, numPartitions)
	for p := range parts {
		parts[p] = int32(p)
	}
	resp, err := c.admin.ListConsumerGroupOffsets(c.group, map[string][]int32{c.topic: parts})
	if err != nil {
		return nil, failf(step, "ListConsumerGroupOffsets %s: %v", c.group, err)
	}
	ends := make([]int64, numPartitions)
	for _, p := range parts {
		end, err := c.client.GetOffset(c.topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, failf(step, "GetOffset(%s, %d, OffsetNewest): %v", c.topic, p, err)
		}
		if want := int64(len(c.byPart[p])); end != want {
			return nil, failf(step, "partition %d: end offset %d, want %d (records produced to it)", p, end, want)
		}
		ends[p] = end
		b := resp.GetBlock(c.topic, p)
		if b == nil {
			return nil, failf(step, "partition %d: no committed offset returned for group %s", p, c.group)
		}
		if !errors.Is(b.Err, sarama.ErrNoError) {
			return nil, failf(step, "partition %d: committed offset error %v", p, b.Err)
		}
		if b.Offset != end {
			return nil, failf(step, "partition %d: committed offset %d, want the end offset %d", p, b.Offset, end)
		}
	}
	fmt.Printf("committed offsets of %s: %v = end offsets\n", c.group, ends)
	return ends, nil
}

func (c *checker) deleteTopic(ctx context.Context) error {
	const step = "delete-topic"
	c.setStep(step)
	if err := c.admin.DeleteTopic(c.topic); err != nil {
		return failf(step, "DeleteTopic %s: %v", c.topic, err)
	}
	c.created = false
	var last string
	err := poll(ctx, deleteTimeout, func() bool {
		topics, err := c.admin.ListTopics()
		if err != nil {
			last = fmt.Sprintf("ListTopics: %v", err)
			return false
		}
		if _, ok := topics[c.topic]; ok {
			last = fmt.Sprintf("ListTopics still lists %s", c.topic)
			return false
		}
		return true
	})
	if err != nil {
		return failf(step, "%v; last: %s", err, last)
	}
	fmt.Printf("deleted %s\n", c.topic)
	return nil
}

// cleanup deletes the topic after a failure (best effort).
func (c *checker) cleanup() {
	if c.created && c.admin != nil {
		_ = c.admin.DeleteTopic(c.topic)
	}
}

// poll calls f every 200ms until it returns true, the timeout passes or ctx ends.
func poll(ctx context.Context, timeout time.Duration, f func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if f() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not true after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

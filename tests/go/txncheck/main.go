// Command txncheck drives a Kafka-compatible broker's transactions with the
// franz-go client: a transactional producer commits 30 records over 3
// partitions, aborts 30 and commits 30 more; a read_committed consumer must
// read exactly the 60 committed ones, in order per partition, and a
// read_uncommitted one all 90. Then a second client with the same
// transactional id fences the first: the first one's commit fails, and its
// records are never read as committed. With -transaction-version 2 (the
// broker finalizes it), the producer's epoch must have moved with its
// commits and aborts (KIP-890 part 2; franz-go opts in once it has seen the
// broker's features, so the first transaction may still be of version 1).
//
// Everything is bounded by context timeouts. It ends with a "PASS ..." line and
// exit 0, or prints "FAIL <step>: <what>" to stderr and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const partitions = 3

var bootstrap = flag.String("bootstrap", "127.0.0.1:9092", "broker to bootstrap from")
var prefix = flag.String("topic-prefix", "txncheck", "prefix of the topics created")
var timeout = flag.Duration("timeout", 120*time.Second, "bound on the whole run")
var txnVersion = flag.Int("transaction-version", 2, "the transaction.version the broker finalizes")

func fail(step, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL %s: %s\n", step, fmt.Sprintf(format, args...))
	os.Exit(1)
}

func transactional(id string) *kgo.Client {
	c, err := kgo.NewClient(
		kgo.SeedBrokers(*bootstrap),
		kgo.TransactionalID(id),
		kgo.TransactionTimeout(20*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		fail("client", "%v", err)
	}
	return c
}

// send produces n records value prefix+i to partition i%3 and waits for them.
func send(ctx context.Context, c *kgo.Client, topic, prefix string, n int) error {
	var rs []*kgo.Record
	for i := 0; i < n; i++ {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: []byte(fmt.Sprintf("%s%d", prefix, i))})
	}
	return c.ProduceSync(ctx, rs...).FirstErr()
}

// txn runs one transaction of n records and ends it.
func txn(ctx context.Context, c *kgo.Client, topic, prefix string, n int, commit kgo.TransactionEndTry) {
	if err := c.BeginTransaction(); err != nil {
		fail("begin", "%v", err)
	}
	if err := send(ctx, c, topic, prefix, n); err != nil {
		fail("produce", "%v", err)
	}
	if err := c.EndTransaction(ctx, commit); err != nil {
		fail("end", "%v", err)
	}
}

// readAll reads every partition from the start until no record arrives for a
// second after `want` records, with the given isolation level.
func readAll(ctx context.Context, topic string, committed bool, want int) map[int32][]string {
	level := kgo.ReadUncommitted()
	if committed {
		level = kgo.ReadCommitted()
	}
	offsets := map[int32]kgo.Offset{}
	for p := int32(0); p < partitions; p++ {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(*bootstrap), kgo.FetchIsolationLevel(level),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	if err != nil {
		fail("consumer", "%v", err)
	}
	defer c.Close()
	out := map[int32][]string{}
	total := 0
	quietSince := time.Now()
	for {
		if ctx.Err() != nil {
			fail("consume", "timed out with %d of %d records", total, want)
		}
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := c.PollFetches(pctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], string(r.Value))
			n++
		})
		total += n
		if n > 0 {
			quietSince = time.Now()
		}
		if total >= want && time.Since(quietSince) > time.Second {
			return out
		}
	}
}

func count(read map[int32][]string, prefix string) int {
	n := 0
	for _, vs := range read {
		for _, v := range vs {
			if strings.HasPrefix(v, prefix) {
				n++
			}
		}
	}
	return n
}

func main() {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(*bootstrap))
	if err != nil {
		fail("client", "%v", err)
	}
	adm := kadm.NewClient(admin)
	topic, fenceTopic := *prefix+"-commit", *prefix+"-fence"
	if _, err := adm.CreateTopics(ctx, partitions, -1, nil, topic, fenceTopic); err != nil {
		fail("create", "%v", err)
	}

	p := transactional(*prefix + "-tx")
	txn(ctx, p, topic, "c1-", 30, kgo.TryCommit)
	txn(ctx, p, topic, "ab-", 30, kgo.TryAbort)
	txn(ctx, p, topic, "c2-", 30, kgo.TryCommit)
	p.Close()
	described, err := adm.DescribeTransactions(ctx, *prefix+"-tx")
	if err != nil {
		fail("describe", "%v", err)
	}
	d, ok := described[*prefix+"-tx"]
	if !ok || d.Err != nil {
		fail("describe", "%v", described)
	}
	if *txnVersion >= 2 && d.ProducerEpoch < 2 {
		fail("transaction.version", "epoch %d after three transactions: the epoch did not move with them", d.ProducerEpoch)
	}
	fmt.Printf("txncheck: epoch %d after three transactions\n", d.ProducerEpoch)
	committed := readAll(ctx, topic, true, 60)
	if count(committed, "ab-") != 0 || count(committed, "c1-") != 30 || count(committed, "c2-") != 30 {
		fail("read_committed", "%v", committed)
	}
	for part := int32(0); part < partitions; part++ {
		var want []string
		for _, prefix := range []string{"c1-", "c2-"} {
			for i := int(part); i < 30; i += partitions {
				want = append(want, fmt.Sprintf("%s%d", prefix, i))
			}
		}
		if !slices.Equal(committed[part], want) {
			fail("read_committed", "partition %d: %v, want %v", part, committed[part], want)
		}
	}
	all := readAll(ctx, topic, false, 90)
	if count(all, "ab-") != 30 {
		fail("read_uncommitted", "%v", all)
	}
	fmt.Println("txncheck: commit and abort OK")

	zombie := transactional(*prefix + "-fenced")
	if err := zombie.BeginTransaction(); err != nil {
		fail("begin", "%v", err)
	}
	if err := send(ctx, zombie, fenceTopic, "zombie-", 6); err != nil {
		fail("produce", "%v", err)
	}
	next := transactional(*prefix + "-fenced")
	txn(ctx, next, fenceTopic, "next-", 6, kgo.TryCommit)
	// The first instance was fenced when the second one initialized: its
	// transaction was aborted and its commit must fail.
	if err := zombie.EndTransaction(ctx, kgo.TryCommit); err == nil {
		fail("fencing", "a fenced producer committed")
	} else {
		fmt.Printf("txncheck: the fenced producer's commit failed as it must: %v\n", err)
	}
	zombie.Close()
	next.Close()
	read := readAll(ctx, fenceTopic, true, 6)
	if count(read, "zombie-") != 0 || count(read, "next-") != 6 {
		fail("fencing", "read_committed: %v", read)
	}
	fmt.Println("txncheck: fencing OK")
	fmt.Println("PASS txncheck: commit/abort, fencing")
}

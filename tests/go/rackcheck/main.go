// rackcheck: a franz-go consumer with a rack (client.rack, KIP-392) that reads a topic from
// the beginning until it has --records records, and prints each partition's count and the
// records' values in offset order as JSON lines, so a test can check what was read (the
// broker's log shows which replica served it).
//
// Usage: rackcheck --bootstrap host:port,... --topic T --rack R --records N [--timeout 60s]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	bootstrap := flag.String("bootstrap", "", "comma-separated host:port list (required)")
	topic := flag.String("topic", "", "topic to read (required)")
	rack := flag.String("rack", "", "the consumer's rack (client.rack)")
	records := flag.Int("records", 0, "records to read before stopping (required)")
	timeout := flag.Duration("timeout", time.Minute, "deadline for the whole run")
	flag.Parse()
	if *bootstrap == "" || *topic == "" || *records < 1 || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(splitComma(*bootstrap)...),
		kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.Rack(*rack),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	values := map[int32][]string{}
	n := 0
	for n < *records {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			fmt.Fprintf(os.Stderr, "timed out after %d of %d records\n", n, *records)
			os.Exit(1)
		}
		fs.EachError(func(t string, p int32, err error) {
			fmt.Fprintf(os.Stderr, "fetch %s[%d]: %v\n", t, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			values[r.Partition] = append(values[r.Partition], string(r.Value))
			n++
		})
	}
	out := json.NewEncoder(os.Stdout)
	for p, vs := range values {
		if err := out.Encode(map[string]any{"partition": p, "values": vs}); err != nil {
			os.Exit(1)
		}
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

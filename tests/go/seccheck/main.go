// seccheck: franz-go over TLS with a SASL login (SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN).
// It creates a topic, produces --records records synchronously with acks=all, reads them
// back in order and checks every value, and prints "PASS". With --expect-auth-failure it
// instead expects the broker to refuse the login, and prints "PASS" when the error is
// SASL_AUTHENTICATION_FAILED.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func fail(format string, args ...any) {
	fmt.Printf("FAIL: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	bootstrap := flag.String("bootstrap", "", "broker address")
	ca := flag.String("ca", "", "PEM file of the CA that signed the broker's certificate")
	mechanism := flag.String("mechanism", "SCRAM-SHA-512", "SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN")
	user := flag.String("user", "", "user name")
	password := flag.String("password", "", "password")
	topic := flag.String("topic", "", "topic to create and use")
	records := flag.Int("records", 100, "records to produce and read back")
	expectAuthFailure := flag.Bool("expect-auth-failure", false, "expect the login to be refused")
	timeout := flag.Duration("timeout", 120*time.Second, "overall bound")
	flag.Parse()

	pem, err := os.ReadFile(*ca)
	if err != nil {
		fail("reading %s: %v", *ca, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fail("no certificate in %s", *ca)
	}
	var mech sasl.Mechanism
	switch *mechanism {
	case "SCRAM-SHA-256":
		mech = scram.Auth{User: *user, Pass: *password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		mech = scram.Auth{User: *user, Pass: *password}.AsSha512Mechanism()
	case "PLAIN":
		mech = plain.Auth{User: *user, Pass: *password}.AsMechanism()
	default:
		fail("unknown mechanism %s", *mechanism)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(*bootstrap),
		kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		kgo.SASL(mech),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RecordRetries(3),
	)
	if err != nil {
		fail("client: %v", err)
	}
	defer cl.Close()

	if *expectAuthFailure {
		err := cl.Ping(ctx)
		if err == nil {
			fail("the login was accepted")
		}
		if !errors.Is(err, kerr.SaslAuthenticationFailed) && !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
			fail("expected SASL_AUTHENTICATION_FAILED, got %v", err)
		}
		fmt.Printf("PASS: login refused: %v\n", err)
		return
	}

	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, *topic); err != nil {
		fail("create topic: %v", err)
	}
	for i := 0; i < *records; i++ {
		r := &kgo.Record{Topic: *topic, Value: []byte(fmt.Sprintf("v%d", i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			fail("produce %d: %v", i, err)
		}
	}
	seen := 0
	for seen < *records {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			fail("read %d of %d records before the timeout", seen, *records)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			fail("fetch: %v", errs[0].Err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if want := fmt.Sprintf("v%d", seen); string(r.Value) != want || r.Offset != int64(seen) {
				fail("record %d came back as %q at offset %d", seen, r.Value, r.Offset)
			}
			seen++
		})
	}
	fmt.Printf("PASS: %s over TLS, %d records\n", *mechanism, seen)
}

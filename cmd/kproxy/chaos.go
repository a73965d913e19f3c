package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const chaosUsage = `kproxy chaos: drive a running kproxy's fault-injection API
(kproxy run --enable-fault-injection)

  kproxy chaos [FLAGS] state
  kproxy chaos [FLAGS] crash SERVICE_PORT [portal|balancer|affinity|serviceport]
  kproxy chaos [FLAGS] crash watcher|proxier|rules
  kproxy chaos [FLAGS] storm --rate N --duration D [--seed S] [--kinds portal,proxier,...]   (N <= 100/s, D <= 10m)
  kproxy chaos [FLAGS] endpoint IP:PORT fail|stall|panic DURATION (DURATION <= 1h)
  kproxy chaos [FLAGS] listener SERVICE_PORT break        (shut its TCP listening sockets down under it)
  kproxy chaos [FLAGS] listener SERVICE_PORT emfile DURATION   (accepts fail with EMFILE, DURATION <= 1h)
  kproxy chaos [FLAGS] apiserver break   (close kproxy's connections to the API server, its watches with them)
  kproxy chaos [FLAGS] rules DURATION|N   (kernel rule transactions fail for DURATION <= 10m, or the next N)

FLAGS: --admin-address ADDR (default 127.0.0.1:10260), --admin-token-file
FILE (default: the one kproxy run wrote for that address).
SERVICE_PORT is "namespace/name:portName/PROTOCOL", as kproxy logs it.
`

func chaosCommand(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("kproxy chaos", flag.ContinueOnError)
	admin := fs.String("admin-address", DefaultAdminAddress, "the admin API of the kproxy to drive")
	tokenFile := fs.String("admin-token-file", "", "the token kproxy run wrote (default: its default for --admin-address)")
	fs.Usage = func() { fmt.Fprint(os.Stderr, chaosUsage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	args = fs.Args()
	if len(args) == 0 {
		fs.Usage()
		return errors.New("chaos: missing subcommand")
	}
	for _, a := range args[1:] {
		if (a == "-h" || a == "--help" || a == "-help") && args[0] != "storm" { // storm has flags of its own
			fs.Usage()
			return flag.ErrHelp
		}
	}
	if *tokenFile == "" {
		*tokenFile = defaultAdminTokenFile(*admin)
	}
	base := "http://" + *admin
	client := &adminClient{http: &http.Client{Timeout: maxChaosDuration + time.Minute}, tokenFile: *tokenFile, out: out}
	switch args[0] {
	case "state":
		return client.call(http.MethodGet, base+"/state", nil)
	case "listener":
		if len(args) < 3 || len(args) > 4 {
			return errors.New("chaos listener: want SERVICE_PORT break, or SERVICE_PORT emfile DURATION")
		}
		req := listenerFaultRequest{ServicePort: args[1], Fault: args[2]}
		if len(args) == 4 {
			req.Duration = args[3]
		}
		return client.call(http.MethodPost, base+"/listener-fault", req)
	case "crash":
		if len(args) < 2 || len(args) > 3 {
			return errors.New("chaos crash: want SERVICE_PORT [ACTOR]")
		}
		req := crashRequest{ServicePort: args[1]}
		if len(args) == 3 {
			req.Actor = args[2]
		}
		if len(args) == 2 && topActor(args[1]) {
			req = crashRequest{Actor: args[1]}
		}
		return client.call(http.MethodPost, base+"/crash", req)
	case "storm":
		sf := flag.NewFlagSet("kproxy chaos storm", flag.ContinueOnError)
		rate := sf.Float64("rate", 20, "portal crashes per second")
		d := sf.Duration("duration", 10*time.Second, "how long")
		seed := sf.Uint64("seed", 1, "seed for choosing service ports")
		kinds := sf.String("kinds", "portal", "comma-separated actor kinds to crash: portal, balancer, affinity, serviceport, watcher, proxier, rules")
		if err := sf.Parse(args[1:]); err != nil {
			return err
		}
		return client.call(http.MethodPost, base+"/chaos", chaosRequest{Rate: *rate, Duration: d.String(), Seed: *seed, Kinds: strings.Split(*kinds, ",")})
	case "endpoint":
		if len(args) != 4 {
			return errors.New("chaos endpoint: want IP:PORT fail|stall|panic DURATION")
		}
		return client.call(http.MethodPost, base+"/endpoint-fault", endpointFaultRequest{Endpoint: args[1], Mode: args[2], Duration: args[3]})
	case "apiserver":
		if len(args) != 2 {
			return errors.New("chaos apiserver: want break")
		}
		return client.call(http.MethodPost, base+"/apiserver-fault", apiserverFaultRequest{Fault: args[1]})
	case "rules":
		if len(args) != 2 {
			return errors.New("chaos rules: want DURATION, or a count N of transactions to fail")
		}
		if n, err := strconv.Atoi(args[1]); err == nil {
			return client.call(http.MethodPost, base+"/rules-fault", rulesFaultRequest{Count: n})
		}
		return client.call(http.MethodPost, base+"/rules-fault", rulesFaultRequest{Duration: args[1]})
	default:
		fs.Usage()
		return fmt.Errorf("chaos: unknown subcommand %q", args[0])
	}
}

// adminClient calls the admin API with the token and JSON bodies.
type adminClient struct {
	http      *http.Client
	tokenFile string // read at the first call: --help needs no token
	out       io.Writer
}

func (c *adminClient) call(method, u string, body any) error {
	token, err := readAdminToken(c.tokenFile)
	if err != nil {
		return err
	}
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, u, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w (is kproxy running with --enable-fault-injection?)", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	c.out.Write(out)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("admin API: %s", resp.Status)
	}
	return nil
}

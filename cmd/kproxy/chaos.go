package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

const chaosUsage = `kproxy chaos: drive a running kproxy's fault-injection API
(kproxy run --enable-fault-injection)

  kproxy chaos [--admin-address ADDR] state
  kproxy chaos [--admin-address ADDR] crash SERVICE_PORT [portal|balancer|affinity|serviceport]
  kproxy chaos [--admin-address ADDR] storm --rate N --duration D [--seed S]
  kproxy chaos [--admin-address ADDR] endpoint IP:PORT fail|stall DURATION
  kproxy chaos [--admin-address ADDR] rules DURATION   (kernel rule transactions fail)

SERVICE_PORT is "namespace/name:portName/PROTOCOL", as kproxy logs it.
`

func chaosCommand(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("kproxy chaos", flag.ContinueOnError)
	admin := fs.String("admin-address", DefaultAdminAddress, "the admin API of the kproxy to drive")
	fs.Usage = func() { fmt.Fprint(os.Stderr, chaosUsage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	args = fs.Args()
	if len(args) == 0 {
		fs.Usage()
		return errors.New("chaos: missing subcommand")
	}
	base := "http://" + *admin
	client := &http.Client{Timeout: 2 * time.Hour}
	switch args[0] {
	case "state":
		return call(client, out, http.MethodGet, base+"/state", nil)
	case "crash":
		if len(args) < 2 || len(args) > 3 {
			return errors.New("chaos crash: want SERVICE_PORT [ACTOR]")
		}
		v := url.Values{"servicePort": {args[1]}}
		if len(args) == 3 {
			v.Set("actor", args[2])
		}
		return call(client, out, http.MethodPost, base+"/crash", v)
	case "storm":
		sf := flag.NewFlagSet("kproxy chaos storm", flag.ContinueOnError)
		rate := sf.Float64("rate", 20, "portal crashes per second")
		d := sf.Duration("duration", 10*time.Second, "how long")
		seed := sf.Uint64("seed", 1, "seed for choosing service ports")
		if err := sf.Parse(args[1:]); err != nil {
			return err
		}
		return call(client, out, http.MethodPost, base+"/chaos", url.Values{
			"rate": {strconv.FormatFloat(*rate, 'f', -1, 64)}, "duration": {d.String()}, "seed": {strconv.FormatUint(*seed, 10)},
		})
	case "endpoint":
		if len(args) != 4 {
			return errors.New("chaos endpoint: want IP:PORT fail|stall DURATION")
		}
		return call(client, out, http.MethodPost, base+"/endpoint-fault", url.Values{"endpoint": {args[1]}, "mode": {args[2]}, "duration": {args[3]}})
	case "rules":
		if len(args) != 2 {
			return errors.New("chaos rules: want DURATION")
		}
		return call(client, out, http.MethodPost, base+"/rules-fault", url.Values{"duration": {args[1]}})
	default:
		fs.Usage()
		return fmt.Errorf("chaos: unknown subcommand %q", args[0])
	}
}

func call(client *http.Client, out io.Writer, method, u string, form url.Values) error {
	var resp *http.Response
	var err error
	if method == http.MethodGet {
		resp, err = client.Get(u)
	} else {
		resp, err = client.PostForm(u, form)
	}
	if err != nil {
		return fmt.Errorf("admin API: %w (is kproxy running with --enable-fault-injection?)", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	out.Write(body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("admin API: %s", resp.Status)
	}
	return nil
}

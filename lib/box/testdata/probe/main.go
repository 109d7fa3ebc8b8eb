// Command probe runs inside a test box and prints what it can see and do,
// one line per argument, so the box tests can judge the sandbox from the
// inside. Each argument is OP or OP=ARG; each line is "OP ARG: ok ..." or
// "OP ARG: error: ...". Ops:
//
//	uid            the process's uid:gid
//	status=FIELD   a field of /proc/self/status: CapEff, NoNewPrivs, Seccomp…
//	prctl=nnp      the no-new-privileges bit, asked of the kernel (gVisor's
//	               /proc/self/status has no NoNewPrivs line)
//	prctl=seccomp  the seccomp mode, asked of the kernel: 2 is a filter
//	write=PATH     create PATH and write a byte to it
//	read=PATH      read PATH and print its size
//	connect=ADDR   open a TCP connection to ADDR (2 s timeout)
//	get=URL        HTTP GET URL directly (no proxy) and print the body
//	dns=NAME       resolve NAME (2 s timeout)
//	alloc=MIB      allocate and touch MIB MiB of memory
//	syscall32      getpid through the 32-bit x86 syscall ABI (amd64; last)
//	exit=CODE      exit with CODE
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	for _, a := range os.Args[1:] {
		op, arg, _ := strings.Cut(a, "=")
		res, err := run(op, arg)
		if err != nil {
			fmt.Printf("%s %s: error: %v\n", op, arg, err)
		} else {
			fmt.Printf("%s %s: ok %s\n", op, arg, res)
		}
	}
}

func run(op, arg string) (string, error) {
	switch op {
	case "uid":
		return fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()), nil
	case "status":
		return status(arg)
	case "prctl":
		opt := map[string]int{"nnp": unix.PR_GET_NO_NEW_PRIVS, "seccomp": unix.PR_GET_SECCOMP}[arg]
		if opt == 0 {
			return "", fmt.Errorf("unknown prctl %q", arg)
		}
		v, _, errno := unix.Syscall(unix.SYS_PRCTL, uintptr(opt), 0, 0)
		if errno != 0 {
			return "", errno
		}
		return strconv.Itoa(int(v)), nil
	case "write":
		return "", os.WriteFile(arg, []byte("x"), 0o644)
	case "read":
		b, err := os.ReadFile(arg)
		return fmt.Sprintf("%d bytes", len(b)), err
	case "connect":
		c, err := net.DialTimeout("tcp", arg, 2*time.Second)
		if err != nil {
			return "", err
		}
		return "connected", c.Close()
	case "get":
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
		resp, err := c.Get(arg)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b), err
	case "dns":
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, arg)
		return strings.Join(addrs, ","), err
	case "alloc":
		n, err := strconv.Atoi(arg)
		if err != nil {
			return "", err
		}
		b := make([]byte, n<<20)
		for i := range b {
			b[i] = 1
		}
		return fmt.Sprintf("%d MiB", len(b)>>20), nil
	case "syscall32":
		return syscall32()
	case "exit":
		n, err := strconv.Atoi(arg)
		if err != nil {
			return "", err
		}
		os.Exit(n)
	}
	return "", fmt.Errorf("unknown op %q", op)
}

func status(field string) (string, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no %s in /proc/self/status", field)
}

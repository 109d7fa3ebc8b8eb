package main

import (
	"errors"
	"runtime"
	"strconv"
	"time"
)

func int80getpid() int64

// syscall32 calls getpid through the 32-bit ABI on a thread of its own,
// which a seccomp filter without that ABI kills. Run it last: the thread
// is gone for good.
func syscall32() (string, error) {
	done := make(chan int64, 1)
	go func() {
		runtime.LockOSThread()
		done <- int80getpid()
	}()
	select {
	case pid := <-done:
		return "pid " + strconv.FormatInt(pid, 10), nil
	case <-time.After(500 * time.Millisecond):
		return "", errors.New("the calling thread never came back")
	}
}

//go:build !amd64

package main

import "errors"

func syscall32() (string, error) { return "", errors.New("only on amd64") }

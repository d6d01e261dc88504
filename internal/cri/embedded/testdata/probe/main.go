// Command probe is a tiny static program the embedded runtime's tests put
// into images: each sub-command reports one thing about its environment.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("probe: no command")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "echo":
		fmt.Println(strings.Join(args, " "))
	case "pid":
		fmt.Println(os.Getpid())
	case "id":
		fmt.Printf("%d %d %v\n", os.Getuid(), os.Getgid(), func() []int { g, _ := os.Getgroups(); return g }())
	case "pwd":
		d, _ := os.Getwd()
		fmt.Println(d)
	case "env":
		fmt.Println(os.Getenv(args[0]))
	case "ls":
		entries, err := os.ReadDir(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		fmt.Println(strings.Join(names, " "))
	case "cat":
		b, err := os.ReadFile(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(string(b))
	case "write":
		if err := os.WriteFile(args[0], []byte(args[1]), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "hostname":
		h, _ := os.Hostname()
		fmt.Println(h)
	case "exit":
		n, _ := strconv.Atoi(args[0])
		fmt.Fprintln(os.Stderr, "exiting with", n)
		os.Exit(n)
	case "trap":
		// Report the first signal received and exit 0 (as PID 1 in its
		// namespace, the process would otherwise ignore it).
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGQUIT)
		fmt.Println("trapping")
		fmt.Println("got", <-sigs)
	case "sleep":
		fmt.Println("sleeping")
		for {
			time.Sleep(time.Hour)
		}
	default:
		fmt.Fprintln(os.Stderr, "probe: unknown command", os.Args[1])
		os.Exit(2)
	}
}

package ctl

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

type chatOptions struct {
	message string
	wait    time.Duration
	quiet   time.Duration
	asJSON  bool
	// progress shows the agent's core jobs' progress, a line per change
	// of a job at most every progressInterval.
	progress         bool
	progressInterval time.Duration
}

func newChatCommand(g *globals) *cobra.Command {
	var opts chatOptions
	cmd := &cobra.Command{
		Use:   "chat <agent-id>",
		Short: "Talk to an agent from the terminal, as its DM's user would",
		Long: "Talk to an agent from the terminal, through choird, as its DM's user would: the message goes into\n" +
			"the agent's inbox and its replies are printed as they are queued. The progress of its core jobs is\n" +
			"printed too, a line per change of a job, as its DM's progress message shows it.\n\n" +
			"With -m, sends one message, prints the replies and exits. Without it, reads lines from stdin\n" +
			"until end of input.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.progressInterval <= 0 {
				return usageErr(fmt.Errorf("--progress-interval must be positive, not %s", opts.progressInterval))
			}
			c := g.client()
			defer c.Close()
			if opts.message != "" {
				return chatOnce(cmd.Context(), g, c, args[0], opts)
			}
			return chatInteractive(cmd.Context(), g, c, args[0], cmd.InOrStdin(), opts)
		},
	}
	cmd.Flags().StringVarP(&opts.message, "message", "m", "", "send this one message, print the replies, and exit")
	cmd.Flags().DurationVar(&opts.wait, "wait", 2*time.Minute, "with -m: how long to wait for the first reply")
	cmd.Flags().DurationVar(&opts.quiet, "quiet", 2*time.Second, "with -m: after a reply, how long to wait for more")
	cmd.Flags().BoolVar(&opts.asJSON, "json", false, "with -m: print the replies as JSON (and no progress)")
	cmd.Flags().BoolVar(&opts.progress, "progress", true, "print the progress of the agent's core jobs")
	cmd.Flags().DurationVar(&opts.progressInterval, "progress-interval", defaultProgressInterval,
		"the shortest time between two progress lines of one core job")
	return cmd
}

func chatID() (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return int64(binary.BigEndian.Uint64(b[:])>>1) | 1, nil
}

func chatSend(ctx context.Context, c *admin.Client, agentID, text string) (admin.ChatSent, error) {
	id, err := chatID()
	if err != nil {
		return admin.ChatSent{}, err
	}
	return c.ChatSend(ctx, agentID, admin.ChatSendRequest{MessageID: id, Text: text})
}

func chatPoll(ctx context.Context, c *admin.Client, agentID string, after int64, wait time.Duration) ([]admin.ChatMessage, error) {
	return c.ChatPoll(ctx, agentID, admin.ChatPollRequest{After: after, WaitMS: wait.Milliseconds()})
}

func printChat(w io.Writer, agentID string, m admin.ChatMessage) {
	if m.Kind == "text" {
		fmt.Fprintf(w, "%s: %s\n", agentID, m.Text)
		return
	}
	fmt.Fprintf(w, "%s: [%s %s] %s\n", agentID, m.Kind, m.FilePath, m.Text)
}

// chatOnce sends one message and prints the replies: it waits up to
// opts.wait for the first, then for more until opts.quiet passes without
// one.
func chatOnce(ctx context.Context, g *globals, c *admin.Client, agentID string, opts chatOptions) error {
	out := &syncWriter{w: g.stdout}
	if opts.progress && !opts.asJSON {
		watch := startCoreWatch(ctx, c, out, agentID, opts.progressInterval)
		defer watch.stop(ctx)
	}
	sent, err := chatSend(ctx, c, agentID, opts.message)
	if err != nil {
		return err
	}
	if !sent.Pushed {
		fmt.Fprintf(g.stderr, "%s is not running: the message is kept in its inbox and delivered when it starts (choirctl agent start %s)\n",
			agentID, agentID)
		return nil
	}
	var got []admin.ChatMessage
	after, wait := sent.After, opts.wait
	deadline := time.Now().Add(opts.wait)
	for {
		msgs, err := chatPoll(ctx, c, agentID, after, min(wait, 25*time.Second))
		if err != nil {
			return err
		}
		for _, m := range msgs {
			after = m.OutboxID
			got = append(got, m)
			if !opts.asJSON {
				printChat(out, agentID, m)
			}
		}
		switch {
		case len(got) > 0 && len(msgs) == 0:
			if opts.asJSON {
				return writeJSON(g.stdout, got)
			}
			return nil
		case len(got) > 0:
			wait = opts.quiet
		case time.Now().After(deadline):
			return fmt.Errorf("no reply from %s within %s; it may still answer: see choirctl agent status %s, or wait longer with --wait",
				agentID, opts.wait, agentID)
		default:
			wait = time.Until(deadline)
		}
	}
}

// chatInteractive sends each line of in and prints the agent's messages
// as they come, until in ends.
func chatInteractive(ctx context.Context, g *globals, c *admin.Client, agentID string, in io.Reader, opts chatOptions) error {
	out := &syncWriter{w: g.stdout}
	if opts.progress {
		watch := startCoreWatch(ctx, c, out, agentID, opts.progressInterval)
		defer watch.stop(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	after := int64(-1)
	var wg sync.WaitGroup
	defer wg.Wait()
	pollErr := make(chan error, 1)
	wg.Go(func() {
		for ctx.Err() == nil {
			mu.Lock()
			cur := after
			mu.Unlock()
			if cur < 0 {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			msgs, err := chatPoll(ctx, c, agentID, cur, 20*time.Second)
			if err != nil {
				if ctx.Err() == nil {
					pollErr <- err
					cancel()
				}
				return
			}
			mu.Lock()
			for _, m := range msgs {
				after = max(after, m.OutboxID)
				printChat(out, agentID, m)
			}
			mu.Unlock()
		}
	})
	fmt.Fprintf(g.stderr, "talking to %s; end with Ctrl-D\n", agentID)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		sent, err := chatSend(ctx, c, agentID, line)
		if err != nil {
			return err
		}
		mu.Lock()
		if after < 0 {
			after = sent.After
		}
		mu.Unlock()
		if !sent.Pushed {
			fmt.Fprintf(g.stderr, "%s is not running: kept for its next session\n", agentID)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	// Give the last answer a moment before leaving.
	select {
	case err := <-pollErr:
		return err
	case <-time.After(opts.quiet):
	}
	cancel()
	select {
	case err := <-pollErr:
		if !errors.Is(err, context.Canceled) {
			return err
		}
	default:
	}
	return nil
}

// Package logs reads container log files in the CRI format
// ("RFC3339Nano stdout|stderr F|P content" per line) and writes the
// containers' output to a writer, with the options of `kubectl logs`:
// follow, tail, timestamps, since and a byte limit.
package logs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/minilet/minilet/internal/errdefs"
	"k8s.io/utils/clock"
)

// Stream names as they appear in the CRI log format.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Tags of the CRI log format: a full line ends a message, a partial line is
// continued by the next line of the same stream.
const (
	tagFull    = "F"
	tagPartial = "P"
)

// DefaultPollInterval is how often a followed file is checked even when no
// file-system event arrived (events can be lost, or inotify unavailable).
const DefaultPollInterval = time.Second

// Options selects what ReadLogs writes. The zero value writes the whole
// file once, without timestamps.
type Options struct {
	// Follow keeps reading as the file grows until the context ends.
	Follow bool
	// TailLines, when set, writes only the last *TailLines messages that
	// exist when reading starts (0: none, as kubectl --tail=0). Nil or
	// negative: all.
	TailLines *int64
	// Timestamps prefixes each message with its RFC3339Nano time.
	Timestamps bool
	// Since skips messages logged before this time; zero means no limit.
	Since time.Time
	// LimitBytes stops after this many bytes were written; 0 means no limit.
	LimitBytes int64
	// PollInterval bounds the wait between checks of a followed file.
	// Default DefaultPollInterval.
	PollInterval time.Duration
	// Clock drives the poll timer. Default the real clock.
	Clock clock.WithTicker
	// Done, when set, is asked while following each time the end of the
	// file is reached; when it returns true (the container has exited) the
	// rest of the file is written and ReadLogs returns, as the kubelet ends
	// `logs -f` of a stopped container.
	Done func() bool
}

// Tail returns a TailLines value for n messages.
func Tail(n int64) *int64 { return &n }

// Message is one parsed log message (partial lines already joined).
type Message struct {
	Time    time.Time
	Stream  string
	Content []byte // without the trailing newline
	// Unterminated marks partial lines that no full line ended when the
	// file did (a container's last output without a newline, which the
	// runtime writes as a P line): written as they are, without a newline,
	// as the kubelet writes a partial line.
	Unterminated bool
}

// ParseLine parses one CRI log line (without its newline). It returns the
// timestamp, stream, tag and content, or an error wrapping
// errdefs.ErrInvalidArgument when the line is not in the CRI format.
func ParseLine(line []byte) (ts time.Time, stream, tag string, content []byte, err error) {
	bad := func(why string) error {
		return fmt.Errorf("log line %q: %s: %w", truncate(line), why, errdefs.ErrInvalidArgument)
	}
	rest := line
	field := func() ([]byte, bool) {
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			f := rest
			rest = nil
			return f, false
		}
		f := rest[:i]
		rest = rest[i+1:]
		return f, true
	}
	tsField, ok1 := field()
	streamField, ok2 := field()
	tagField, hasContent := field()
	if !ok1 || !ok2 || len(tagField) == 0 {
		return time.Time{}, "", "", nil, bad(`want "TIME STREAM TAG CONTENT"`)
	}
	ts, err = time.Parse(time.RFC3339Nano, string(tsField))
	if err != nil {
		return time.Time{}, "", "", nil, bad("timestamp: " + err.Error())
	}
	switch string(streamField) {
	case Stdout:
		stream = Stdout
	case Stderr:
		stream = Stderr
	default:
		return time.Time{}, "", "", nil, bad(fmt.Sprintf("stream %q is neither stdout nor stderr", streamField))
	}
	// The tag may carry more fields after ':' in future formats; the first
	// field decides partial or full.
	if i := bytes.IndexByte(tagField, ':'); i >= 0 {
		tagField = tagField[:i]
	}
	switch string(tagField) {
	case tagFull:
		tag = tagFull
	case tagPartial:
		tag = tagPartial
	default:
		return time.Time{}, "", "", nil, bad(fmt.Sprintf("tag %q is neither F nor P", tagField))
	}
	if hasContent {
		content = rest
	}
	return ts, stream, tag, content, nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// ReadLogs writes the messages of the CRI log file at path to w according
// to opts. Without Follow it returns at the end of the file; with Follow it
// returns when ctx ends (returning nil) or the byte limit is reached. A
// missing file is an error wrapping errdefs.ErrNotFound. Lines that are not
// in the CRI format are skipped.
func ReadLogs(ctx context.Context, path string, opts Options, w io.Writer) error {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("log file %s: %w", path, errdefs.ErrNotFound)
		}
		return fmt.Errorf("open log file %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()

	p := &printer{opts: opts, w: w}
	if opts.TailLines != nil && *opts.TailLines >= 0 {
		if err := p.tail(f, !opts.Follow); err != nil {
			return err
		}
	} else {
		if err := p.copyAvailable(f); err != nil {
			return err
		}
		if !opts.Follow {
			p.writeUnterminated()
		}
	}
	if p.limitReached() || !opts.Follow {
		return p.flushErr()
	}
	return p.follow(ctx, path, f)
}

// printer turns lines into messages and writes them, keeping partial lines
// per stream and counting written bytes.
type printer struct {
	opts    Options
	w       io.Writer
	written int64
	err     error // first write error; stops everything

	// pending holds an incomplete trailing line (no newline yet) of the
	// file being read.
	pending []byte
	// partial holds joined content of P lines per stream, and the time of
	// the first of them.
	partial     map[string][]byte
	partialTime map[string]time.Time
}

func (p *printer) limitReached() bool {
	return p.err != nil || (p.opts.LimitBytes > 0 && p.written >= p.opts.LimitBytes)
}

func (p *printer) flushErr() error { return p.err }

// readLines reads all complete lines available from r and passes each to
// fn; an incomplete last line is kept in p.pending for the next call.
func (p *printer) readLines(r io.Reader, fn func(line []byte)) error {
	br := bufio.NewReaderSize(r, 64*1024)
	for !p.limitReached() {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if err == nil {
				line := chunk[:len(chunk)-1]
				if len(p.pending) > 0 {
					line = append(p.pending, line...)
					p.pending = nil
				}
				fn(line)
			} else {
				p.pending = append(p.pending, chunk...)
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil
		default:
			return fmt.Errorf("read log file: %w", err)
		}
	}
	return nil
}

// parse joins partial lines; it returns the message and true when line
// completes one.
func (p *printer) parse(line []byte) (Message, bool) {
	ts, stream, tag, content, err := ParseLine(line)
	if err != nil {
		return Message{}, false
	}
	if p.partial == nil {
		p.partial = map[string][]byte{}
		p.partialTime = map[string]time.Time{}
	}
	if tag == tagPartial {
		if _, ok := p.partialTime[stream]; !ok {
			p.partialTime[stream] = ts
		}
		p.partial[stream] = append(p.partial[stream], content...)
		return Message{}, false
	}
	if prev, ok := p.partial[stream]; ok {
		content = append(prev, content...)
		ts = p.partialTime[stream]
		delete(p.partial, stream)
		delete(p.partialTime, stream)
	}
	// Content may alias the read buffer: valid until the next read only.
	return Message{Time: ts, Stream: stream, Content: content}, true
}

// unterminated takes the partial lines no full line has ended yet, one
// message per stream in the order they began, marked Unterminated.
func (p *printer) unterminated() []Message {
	var ms []Message
	for stream, content := range p.partial {
		ms = append(ms, Message{Time: p.partialTime[stream], Stream: stream, Content: content, Unterminated: true})
	}
	slices.SortFunc(ms, func(a, b Message) int { return a.Time.Compare(b.Time) })
	clear(p.partial)
	clear(p.partialTime)
	return ms
}

// writeUnterminated writes what the file ends with in partial lines: the
// reading is over, no full line will end them.
func (p *printer) writeUnterminated() {
	for _, m := range p.unterminated() {
		p.write(m)
	}
}

// write prints one message, honouring Since, Timestamps and LimitBytes.
func (p *printer) write(m Message) {
	if p.limitReached() {
		return
	}
	if !p.opts.Since.IsZero() && m.Time.Before(p.opts.Since) {
		return
	}
	var buf []byte
	if p.opts.Timestamps {
		buf = append(buf, m.Time.Format(time.RFC3339Nano)...)
		buf = append(buf, ' ')
	}
	buf = append(buf, m.Content...)
	if !m.Unterminated {
		buf = append(buf, '\n')
	}
	if p.opts.LimitBytes > 0 {
		if left := p.opts.LimitBytes - p.written; int64(len(buf)) > left {
			buf = buf[:left]
		}
	}
	n, err := p.w.Write(buf)
	p.written += int64(n)
	if err != nil {
		p.err = fmt.Errorf("write logs: %w", err)
	}
}

// copyAvailable writes every message available in r now.
func (p *printer) copyAvailable(r io.Reader) error {
	if err := p.readLines(r, func(line []byte) {
		if m, ok := p.parse(line); ok {
			p.write(m)
		}
	}); err != nil {
		return err
	}
	return p.err
}

// tail writes the last opts.TailLines messages available in r now; final
// (nothing is read after) counts partial lines the file ends with as a
// message.
func (p *printer) tail(r io.Reader, final bool) error {
	n := int(*p.opts.TailLines)
	if n == 0 {
		// Nothing to print, but consume the file so following starts at
		// its end.
		return p.readLines(r, func(line []byte) { p.parse(line) })
	}
	ring := make([]Message, 0, min(n, 1024))
	start := 0
	keep := func(m Message) {
		// Keep a copy, reusing the slot's buffer of an older message.
		if len(ring) < n {
			m.Content = append([]byte(nil), m.Content...)
			ring = append(ring, m)
			return
		}
		m.Content = append(ring[start].Content[:0], m.Content...)
		ring[start] = m
		start = (start + 1) % n
	}
	err := p.readLines(r, func(line []byte) {
		if m, ok := p.parse(line); ok {
			keep(m)
		}
	})
	if err != nil {
		return err
	}
	if final {
		for _, m := range p.unterminated() {
			keep(m)
		}
	}
	for i := range ring {
		p.write(ring[(start+i)%len(ring)])
	}
	return p.err
}

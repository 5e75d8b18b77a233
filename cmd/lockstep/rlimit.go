package main

import (
	"log/slog"
	"syscall"
)

// fileLimit is the descriptor limit as raiseFileLimit left it.
type fileLimit struct {
	soft, hard, was uint64
	err             error
}

// raiseFileLimit raises the soft limit on open file descriptors
// (RLIMIT_NOFILE) to the hard limit: every connection, pack, loose object
// read and git subprocess takes descriptors, and a server at its limit
// answers 503 (issue 21 item 5). The Go runtime does the same at start on
// Linux; doing it here makes it explicit and lets serve log the result
// (log, once start-up succeeded: a failed start prints one line).
func raiseFileLimit() fileLimit {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fileLimit{err: err}
	}
	fl := fileLimit{soft: lim.Cur, hard: lim.Max, was: lim.Cur}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			fl.err = err
			return fl
		}
		fl.soft = lim.Max
	}
	return fl
}

func (fl fileLimit) log(logger *slog.Logger) {
	if fl.err != nil {
		logger.Warn("file descriptor limit not raised", "soft", fl.soft, "hard", fl.hard, "error", fl.err)
		return
	}
	logger.Info("file descriptor limit raised to the hard limit", "soft", fl.soft, "hard", fl.hard, "soft_was", fl.was)
}

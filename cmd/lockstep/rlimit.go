package main

import (
	"log/slog"
	"syscall"
)

// raiseFileLimit raises the soft limit on open file descriptors
// (RLIMIT_NOFILE) to the hard limit and logs both: every connection,
// pack, loose object read and git subprocess takes descriptors, and a
// server at its limit answers 503 (issue 21 item 5). Git subprocesses get
// the raised limit too.
func raiseFileLimit(logger *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		logger.Warn("file descriptor limit unknown", "error", err)
		return
	}
	was := lim.Cur
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			logger.Warn("file descriptor limit not raised", "soft", was, "hard", lim.Max, "error", err)
			return
		}
	}
	logger.Info("file descriptor limit raised to the hard limit", "soft", lim.Cur, "hard", lim.Max, "soft_was", was)
}

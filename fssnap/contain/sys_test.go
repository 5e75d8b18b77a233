package contain

import "syscall"

func sysProcAttr(s *Session) *syscall.SysProcAttr {
	u, g, caps := s.IDMaps()
	return &syscall.SysProcAttr{Cloneflags: s.Cloneflags(), UidMappings: u, GidMappings: g, AmbientCaps: caps}
}

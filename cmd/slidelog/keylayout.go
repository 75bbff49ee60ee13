package main

import "github.com/slidelog/slidelog/internal/keylayout"

// keyLogs are the names of one key's logs, as the library names them
// (internal/keylayout, which docs/operations.md's "Key layout" describes):
//
//	single-limit log   K = prefix + key
//	AllowAll log       start + window in µs
//	AllowAll index     start + "windows"
//	in-flight log      start + "inflight"
//	quotas' index      start + "periods" (the quotas are named there)
type keyLogs struct {
	single, start, index, inflight, periods string
}

func logsOf(prefix, key string) keyLogs {
	start := keylayout.Start(prefix, key)
	return keyLogs{
		single:   keylayout.Single(prefix, key),
		start:    start,
		index:    keylayout.Index(start),
		inflight: keylayout.Inflight(start),
		periods:  keylayout.Periods(start),
	}
}

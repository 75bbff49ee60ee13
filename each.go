package slidelog

// Ask is one key's part of an AllowEach: N events for Key against every
// one of Limits (one limit, or several as AllowAll takes them).
type Ask struct {
	Key    string
	N      int
	Limits []Limit
}

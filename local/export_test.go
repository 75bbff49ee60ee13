package local

import "reflect"

// runBytes is the bytes a run takes.
var runBytes = int(reflect.TypeOf(run{}).Size())

// StorageBytes is the bytes of event storage that every log of l holds now:
// what the memory tests hold against the events recorded.
func (l *Limiter) StorageBytes() int {
	b := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for _, en := range s.keys {
			b += len(en.one.runs) * runBytes
			for _, e := range en.all {
				b += len(e.runs) * runBytes
			}
		}
		s.mu.Unlock()
	}
	return b
}

// ShardOf is the index of key's shard.
func (l *Limiter) ShardOf(key string) int { return l.shardOf(key) }

// SweepNext makes the next new key of every shard sweep it first.
func (l *Limiter) SweepNext() {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		s.sweep = len(s.keys)
		s.mu.Unlock()
	}
}

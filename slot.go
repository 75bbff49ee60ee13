package slidelog

import "github.com/slidelog/slidelog/internal/keylayout"

// slot is the Redis Cluster hash slot of key (keylayout.Slot).
func slot(key string) int { return keylayout.Slot(key) }

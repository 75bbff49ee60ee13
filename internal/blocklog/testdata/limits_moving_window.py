"""The moving window of the Python `limits` package (its MemoryStorage's
acquire_entry, which takes a cost per hit, and get_moving_window), driven
by a trace on stdin, one step a line (each answered on a line of
stdout before the next is read), on a clock the trace sets (integer
microseconds):

    hit T LIMIT WINDOW W   -> 1 (admitted, W entries recorded at T) or 0
    peek T LIMIT WINDOW    -> the entries live at T
    refund T0 N            -> the entries at T0 taken back (up to N)

A hit at T counts the entries at T - WINDOW or later as live, where
slidelog counts those later than T - WINDOW: the traces keep every time
odd and every window odd, so that no entry is ever exactly WINDOW old.
The storage's expiry thread is off (it only drops what has expired)."""
import sys

import limits.storage.memory as memory

now = [0]
memory.time.time = lambda: now[0]  # the module's clock, set by the trace
memory.MemoryStorage._MemoryStorage__schedule_expiry = lambda self: None

storage = memory.MemoryStorage()
key = "k"
for line in sys.stdin:
    f = line.split()
    if not f:
        continue
    if f[0] == "hit":
        now[0] = int(f[1])
        limit, window, w = int(f[2]), int(f[3]), int(f[4])
        answer = "1" if storage.acquire_entry(key, limit, window, w) else "0"
    elif f[0] == "peek":
        now[0] = int(f[1])
        limit, window = int(f[2]), int(f[3])
        answer = str(storage.get_moving_window(key, limit, window)[1])
    elif f[0] == "refund":
        t0, n = int(f[1]), int(f[2])
        events = storage.events.get(key, [])
        taken = 0
        for e in list(events):
            if taken < n and e.atime == t0:
                events.remove(e)
                taken += 1
        answer = str(taken)
    else:
        sys.exit("unknown step: " + line)
    print(answer, flush=True)

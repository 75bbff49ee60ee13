"""The moving window of the Python `limits` package (its MemoryStorage's
acquire_entry, which takes a cost per hit, and get_moving_window), driven
by a trace on stdin, one step a line (each answered on a line of
stdout before the next is read), on a clock the trace sets (integer
microseconds):

    hit T LIMIT WINDOW W   -> 1 (admitted, W entries recorded at T) or 0
    peek T LIMIT WINDOW    -> the entries live at T
    refund T0 N            -> the entries at T0 taken back (up to N)
    force T WINDOW N       -> 1: N entries recorded at T, whether they fit
                              or not (acquire_entry under a limit past the
                              list's length, so that its check finds no
                              entry to refuse on and it records them)
    wait T LIMIT WINDOW N  -> until N more fit at T (µs; 0: they fit): the
                              entry acquire_entry refuses on (the
                              LIMIT-N-th, newest first) leaves a window
                              after it was recorded
    reset T WINDOW         -> until no entry is live at T (µs; 0: none is)

The list is newest first (every step is at a later T, and acquire_entry
puts its entries in front), so that acquire_entry's check reads the
LIMIT-N-th entry however many are live, more than LIMIT after a force
too: N more fit exactly while that entry has expired. wait and reset
count an entry as gone at exactly WINDOW old, as slidelog does (the
limits package from 1 µs later): the traces' times are odd, and those
instants even.

A hit at T counts the entries at T - WINDOW or later as live, where
slidelog counts those later than T - WINDOW: the traces keep every time
odd and every window odd, so that no entry is ever exactly WINDOW old.
The storage's expiry thread is off, the one its constructor starts too
(that one ran once, 10 ms of real time after the start, and dropped the
entries dead at whatever step the trace had reached by then, as fast as
the machine went): each step that sets T drops the entries whose expiry
has come instead, as the thread would (it only drops what has expired),
at the same step every run. A refund of an expired admission takes
back nothing then; the list stays about as long as its live entries."""
import sys

import limits.storage.memory as memory

now = [0]
memory.time.time = lambda: now[0]  # the module's clock, set by the trace
memory.MemoryStorage._MemoryStorage__schedule_expiry = lambda self: None
memory.MemoryStorage._MemoryStorage__expire_events = lambda self: None

storage = memory.MemoryStorage()
key = "k"


def expire():
    """The expiry thread's drop (MemoryStorage.__expire_events: the entries
    whose expiry has come, at now), in step: they are the list's last (it
    is newest first, and a trace has one window)."""
    events = storage.events.get(key)
    while events and events[-1].expiry <= now[0]:
        events.pop()


for line in sys.stdin:
    f = line.split()
    if not f:
        continue
    if f[0] == "hit":
        now[0] = int(f[1])
        expire()
        limit, window, w = int(f[2]), int(f[3]), int(f[4])
        answer = "1" if storage.acquire_entry(key, limit, window, w) else "0"
    elif f[0] == "peek":
        now[0] = int(f[1])
        expire()
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
    elif f[0] == "force":
        now[0] = int(f[1])
        expire()
        window, n = int(f[2]), int(f[3])
        over = len(storage.events.get(key, [])) + n
        answer = "1" if storage.acquire_entry(key, over, window, n) else "0"
    elif f[0] == "wait":
        now[0] = int(f[1])
        expire()
        limit, window, n = int(f[2]), int(f[3]), int(f[4])
        events = storage.events.get(key, [])
        i = limit - n
        live = i < len(events) and events[i].atime >= now[0] - window
        answer = str(events[i].atime + window - now[0] if live else 0)
    elif f[0] == "reset":
        now[0] = int(f[1])
        expire()
        window = int(f[2])
        events = storage.events.get(key, [])
        live = events and events[0].atime >= now[0] - window
        answer = str(events[0].atime + window - now[0] if live else 0)
    else:
        sys.exit("unknown step: " + line)
    print(answer, flush=True)

# Steps through one scenario of the Walk client under gdb and prints the files of the library that
# the walked command passes through, in order. Run by `.ci/walk/run`; the environment names the
# scenario (WALK_SCENARIO) and the library's sources (WALK_SOURCES).
#
# What counts: a step lands in a function with source lines; it is listed under its file when the
# file is one of the library's, except the primitives every path touches (Engine/Primitives/: the
# lock, the atomic words, the sync points) and the stored properties' accessors (a word's getter,
# a constant's addressor), which a debug build calls where a release build reads a field. The
# client's own lines (the closure the command runs) are listed as `client`. Consecutive steps in
# one file are one entry. The debug builds' own checks are not part of the walk: a step into an
# assertion's condition (an autoclosure) or the machine's invariant checks returns from it at once.
import gdb
import os
import re

scenario = os.environ["WALK_SCENARIO"]
functions = os.environ.get("WALK_FUNCTIONS") == "1"  # list each entry's first function too
sources = os.path.realpath(os.environ["WALK_SOURCES"]) + "/"
for setting in ["pagination off", "confirm off", "complaints 0", "print thread-events off",
                "print inferior-events off"]:
    gdb.execute("set " + setting)

# Accessors, the atomic words' `word(_:)`, and the compiler's outlined copies and destroys (`WOc`,
# `WOh`: a debug build's line tables put them in whichever file the compiler merged them into).
ACCESSOR = re.compile(r"(vg|vs|vM|vau|vlu|vr|vx|Wvd|WO[a-z])$|^\$s14QueueSafeValue13CommandEngineC4wordy")


def place():
    frame = gdb.selected_frame()
    name = frame.name() or ""
    sal = frame.find_sal()
    path = os.path.realpath(sal.symtab.filename) if sal.symtab else ""
    return name, path


def depth():
    frame, count = gdb.selected_frame(), 0
    while frame is not None:
        frame, count = frame.older(), count + 1
    return count


def classify(name, path):
    if path.startswith(sources):
        relative = path[len(sources):]
        if relative.startswith("Engine/Primitives/") or ACCESSOR.search(name) or not name.startswith("$s"):
            return None
        return relative
    if path.endswith("/Walk/main.swift"):
        return "client"
    return None


CHECK = re.compile(r"fu\d*_|[vV]iolation|assertAgrees")


def walk(stop_at, limit=50000):
    """Steps the selected thread until a frame's function contains `stop_at`. A stop of another
    thread at a catch (below) leaves that thread stopped there, and the walk goes on."""
    walker = gdb.selected_thread().num
    entries = []
    for _ in range(limit):
        gdb.execute("step", to_string=True)
        if gdb.selected_thread().num != walker:
            gdb.execute("thread %d" % walker, to_string=True)
            continue
        name, path = place()
        while CHECK.search(name):
            gdb.execute("finish", to_string=True)
            name, path = place()
        if stop_at in name:
            return entries
        where = classify(name, path)
        if not where:
            continue
        level = depth()
        if entries and entries[-1][0] == where:
            entries[-1][3] = level  # the depth of its last step, which the next entry is compared with
        else:
            entries.append([where, level, name, level])
    raise RuntimeError("no end after %d steps" % limit)


def storage(where):
    return where.startswith("Engine/Storage/")


def report(title, entries):
    """Prints the walk, the files below the first (the command's public type), and how often the
    walk called into the storage (`Engine/Storage/`) from outside it, before and after the
    closure: a return into the storage is not a call."""
    while entries and entries[0][0] == "client":  # the client's line that issues the command
        entries = entries[1:]
    while entries and entries[-1][0] == "client":
        entries = entries[:-1]
    # Printed with a prefix: gdb prints the frames it steps through on its own.
    print("WALK %s:" % title)
    if functions:
        for where, level, name, _ in entries:
            print("WALK     %-45s %3d  %s" % (where, level, name[:120]))
    names = [os.path.basename(e[0]) if e[0] != "client" else "(closure)" for e in entries]
    print("WALK   " + " -> ".join(names))
    library = [e[0] for e in entries if e[0] != "client"]
    below = sorted(set(library) - {library[0]}) if library else []
    print("WALK   %d files below %s: %s" % (
        len(below), os.path.basename(library[0]) if library else "-", ", ".join(os.path.basename(b) for b in below)))
    calls, phase = [0, 0], 0
    for i, (where, level, _, _) in enumerate(entries):
        if where == "client":
            phase = 1
        elif i > 0 and storage(where) and not storage(entries[i - 1][0]) and level > entries[i - 1][3]:
            calls[phase] += 1
    closure = any(e[0] == "client" for e in entries)
    print("WALK   calls into the storage: %d %s" % (calls[0], "before the closure, %d after it" % calls[1] if closure else ""))


begin = gdb.Breakpoint("$s4Walk9walkBeginyyF", internal=True)
# The release walk begins inside the holder's closure: the walk is titled by the holder's side.
titles = {"contended-release": "contended-blocking (the releasing holder)"}
gdb.execute("run %s > /dev/null 2>&1" % scenario, to_string=True)
gdb.execute("finish", to_string=True)
begin.delete()

# A dispatched command's block runs on the queue's thread, perhaps while its caller is walked:
# every function of the dispatched command gets a catch that stops only another thread, once.
caught = {"thread": None}
if scenario == "dispatch":
    caller = gdb.selected_thread().num

    class OnAnotherThread(gdb.Breakpoint):
        def stop(self):
            thread = gdb.selected_thread().num
            if thread == caller or caught["thread"] is not None:
                return False
            caught["thread"] = thread
            return True

    listing = gdb.execute("info functions ^\\$s14QueueSafeValue17DispatchedCommandC", to_string=True)
    for name in sorted(set(re.findall(r"(\$s14QueueSafeValue17DispatchedCommandC\w+)\(", listing))):
        OnAnotherThread(name, internal=True)
# Only the walked thread runs while it is stepped, unless the walk needs another thread to run (a
# contended command waits for the holder's release).
gdb.execute("set scheduler-locking %s" % ("off" if scenario in ("contended-blocking", "awaiting") else "on"))
report(titles.get(scenario, scenario + " (calling thread)"), walk("walkEnd"))

if scenario == "dispatch":
    # The block: caught where it first enters the dispatched command's code on the queue's thread.
    gdb.execute("set scheduler-locking off")
    if caught["thread"] is None:
        gdb.execute("continue", to_string=True)
    gdb.execute("thread %d" % caught["thread"], to_string=True)
    gdb.execute("set scheduler-locking on")
    name, path = place()
    first, level = classify(name, path), depth()
    entries = walk("walkQueueDone")
    # The function it was caught in is the walk's first entry (one entry with the next if they
    # share a file).
    if first and not (entries and entries[0][0] == first):
        entries = [[first, level, name, level]] + entries
    report(scenario + " (the queue's thread)", entries)

gdb.execute("kill", to_string=True)

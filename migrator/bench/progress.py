"""A one-line progress bar on a terminal; plain lines otherwise (CI logs)."""
import sys
import time


class Progress:
    def __init__(self, total, stream=sys.stderr):
        self.total = max(1, total)
        self.done = 0
        self.stream = stream
        self.tty = stream.isatty()
        self.start = time.monotonic()

    def step(self, what):
        """Announces the step about to run."""
        elapsed = time.monotonic() - self.start
        eta = ""
        if self.done:
            eta = f" eta {elapsed / self.done * (self.total - self.done):.0f}s"
        if self.tty:
            width = 30
            filled = width * self.done // self.total
            bar = "#" * filled + "." * (width - filled)
            self.stream.write(f"\r\033[K[{bar}] {self.done}/{self.total}{eta}  {what}")
        else:
            self.stream.write(f"[bench] {self.done + 1}/{self.total}{eta}: {what}\n")
        self.stream.flush()

    def advance(self):
        self.done += 1

    def note(self, line):
        """A line that stays (a warning, a failed run) above the bar."""
        self.stream.write(("\r\033[K" if self.tty else "") + line + "\n")
        self.stream.flush()

    def finish(self):
        if self.tty:
            self.stream.write(f"\r\033[K[bench] {self.done}/{self.total} done in "
                              f"{time.monotonic() - self.start:.0f}s\n")
            self.stream.flush()

"""stepmark's batch pipelines and the libraries under them."""

import os

# glog (inside envlogger's C++ extension) logs INFO lines to stderr, e.g. "Empty steps, nothing to do" on every
# writer close; keep its warnings and errors. glog reads this when the extension loads, so it is set here,
# before any module of the package can import envlogger.
os.environ.setdefault("GLOG_minloglevel", "1")

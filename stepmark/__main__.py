import sys

from stepmark.cli import main

sys.exit(main())

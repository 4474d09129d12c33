import sys

from pardnn.cli import main

sys.exit(main())

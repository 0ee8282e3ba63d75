import sys

from surgery.cli import main

sys.exit(main())

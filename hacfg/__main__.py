import sys

from hacfg.cli import main

sys.exit(main())

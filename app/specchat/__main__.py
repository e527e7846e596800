import sys

from specchat.cli import main

sys.exit(main())

import sys

from specchat.cli.main import main

sys.exit(main())

import sys

from edgedp_cli.main import main

sys.exit(main())

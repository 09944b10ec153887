from edgedp_cli.main import main
import sys
sys.exit(main())

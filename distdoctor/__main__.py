import sys

from distdoctor.cli import main

sys.exit(main())

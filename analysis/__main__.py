"""`python -m analysis RESULTS_DIR ...` is `python -m analysis.report RESULTS_DIR ...`."""

import sys

from analysis.report import main

sys.exit(main())

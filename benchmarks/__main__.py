"""`python -m benchmarks list | run NAME --corpus PATH [--repeat N] [--json OUT] | profile NAME ...`"""

import sys

from benchmarks.harness import main

if __name__ == "__main__":
    sys.exit(main())

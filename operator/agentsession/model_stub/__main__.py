"""`python -m agentsession.model_stub`, for installations without the console script on PATH."""

import sys

from agentsession.model_stub.main import main

sys.exit(main())

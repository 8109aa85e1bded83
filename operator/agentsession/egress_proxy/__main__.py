"""`python -m agentsession.egress_proxy`, for installations without the console script on PATH."""

import sys

from agentsession.egress_proxy.main import main

sys.exit(main())

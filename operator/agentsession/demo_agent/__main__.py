import sys

from agentsession.demo_agent.main import main

sys.exit(main())

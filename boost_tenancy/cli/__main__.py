"""python -m boost_tenancy.cli"""

from boost_tenancy.cli import main

raise SystemExit(main())

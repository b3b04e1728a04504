from workloads.cli import main

main()

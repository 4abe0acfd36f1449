from tileprobe.cli import main

main()

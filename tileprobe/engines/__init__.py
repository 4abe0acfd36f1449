"""Reading the serving engines' own sources (FlashInfer today): their tactics, rules and the files they load."""

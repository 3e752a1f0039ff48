"""The ground floor: values and bounds that every layer shares, importing nothing above.

``outcomes`` says what came of one attempt; ``columns`` holds the sizes of the
columns that store what a send is given; ``safe_text`` makes text from remote
servers safe to store, log and hand to receivers.
"""

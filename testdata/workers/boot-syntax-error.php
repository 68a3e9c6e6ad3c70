<?php
// A worker script that cannot even be compiled: serve must exit 1 with PHP's message.
this is not php;

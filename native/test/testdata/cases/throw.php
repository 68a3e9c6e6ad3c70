<?php
echo 'partial';
throw new RuntimeException('boom');

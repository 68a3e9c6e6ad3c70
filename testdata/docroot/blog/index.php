<?php
echo 'blog index';

<?php
header('Link: </style.css>; rel=preload; as=style');
headers_send(103);
header_remove('Link');
echo 'after hints';
